"""Where an `SlsClient` for a project sends its requests (pure: no HTTP library imported, so
the operator commands can check an endpoint and its proxy without loading aiohttp)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

from loghubd.proxy import Proxy, proxy_for


def base_url(endpoint: str, project: str) -> tuple[str, str]:
    """(the URL requests for `project` go to, their Host header); ValueError without a host.

    SLS names the project in the host (`<project>.<endpoint host>`); a local service (an IP
    address, `localhost`: `loghubd serve`) is reached at its own address, with the project in
    the Host header only."""
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    if not parts.hostname:
        raise ValueError(f"endpoint {endpoint!r} has no host")
    host, port = parts.hostname, parts.port
    scheme = parts.scheme or "http"
    netloc_port = f":{port}" if port else ""
    if _is_local(host):
        return f"{scheme}://{host}{netloc_port}", f"{project}.{host}"
    return f"{scheme}://{project}.{host}{netloc_port}", f"{project}.{host}"


def project_in_host(endpoint: str, project: str) -> str:
    """A hint when `endpoint`'s host already begins with `<project>.` (an SDK-era "project
    endpoint", `https://shop.cn-hangzhou.log.aliyuncs.com`), which `base_url` would double
    (`shop.shop.cn-…`): the region endpoint to give instead, in one phrase; "" otherwise.
    Only a hint: a project may share its name with the endpoint's first label (project
    `cn-hangzhou` at `cn-hangzhou.log.aliyuncs.com`, left alone here), and a service may
    answer at a doubled name."""
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    host = parts.hostname or ""
    prefix = f"{project.lower()}."
    if not project or not host.startswith(prefix) or _is_local(host):
        return ""
    rest = host[len(prefix) :]
    if f".{rest}" == _ALIYUN_SUFFIX:  # `<region>.log.aliyuncs.com`, a project named as the region
        return ""
    port = f":{parts.port}" if parts.port else ""
    region = f"{parts.scheme}://{rest}{port}{parts.path}".rstrip("/")
    return (
        f"the endpoint seems to name project {project!r} already (loghubd adds it to the "
        f"host): give the region endpoint {region}"
    )


_ALIYUN_SUFFIX = ".log.aliyuncs.com"
_ALIYUN_NETWORKS = ("-intranet", "-vpc", "-share")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def service_key(endpoint: str) -> tuple[str, str]:
    """What names the service `endpoint` reaches, so that two spellings of one compare equal:
    Alibaba Cloud's endpoints by region (the public, `-intranet`, `-vpc` and `-share` hosts,
    with or without a project in front, reach one service), a loopback address or `localhost`
    by port, any other host by its lower-case name and port (the scheme's default when none
    is given). ValueError without a host."""
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise ValueError(f"endpoint {endpoint!r} has no host")
    port = str(parts.port or _DEFAULT_PORTS.get(parts.scheme or "http") or "")
    if host.endswith(_ALIYUN_SUFFIX):
        region = host[: -len(_ALIYUN_SUFFIX)].rsplit(".", 1)[-1]
        for network in _ALIYUN_NETWORKS:
            region = region.removesuffix(network)
        return "aliyun", region
    if host == "localhost" or _is_loopback(host):
        return "loopback", port
    return host, port


def _is_loopback(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def client_proxy(endpoint: str, project: str, environ: Mapping[str, str]) -> Proxy | None:
    """The proxy an SlsClient for `project` at `endpoint` uses (`loghubd.proxy`)."""
    return proxy_for(base_url(endpoint, project)[0], environ)


def _is_local(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
