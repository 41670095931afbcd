"""loghubd.config.redact: what check-config and error messages may show of a secret."""

from __future__ import annotations

from datetime import date
from types import MappingProxyType

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from loghubd.config.redact import MASK, described, is_secret_name, redact_text, redact_value


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # URL user information: the password goes, the user and the host stay
        ("postgresql://app:hunter2@db:5432/logs", "postgresql://app:***@db:5432/logs"),
        ("postgresql://u:pw@h1:5432,h2:5433/db", "postgresql://u:***@h1:5432,h2:5433/db"),
        ("https://u:p@ss@ingest.example.com/v1", "https://u:***@ingest.example.com/v1"),
        ("s3://AKIA:SeCrEt/+x@bucket/logs", "s3://AKIA:***@bucket/logs"),
        (
            "processor.parquet.path: 's3://A:B@b/x': no",
            "processor.parquet.path: 's3://A:***@b/x': no",
        ),
        ("a://:pw@h", "a://:***@h"),
        ("https://u:p@h/x and http://v:q@g/", "https://u:***@h/x and http://v:***@g/"),
        # secret name=value pairs: libpq, query strings, JDBC
        (
            "host=db user=app password=hunter2 dbname=logs",
            "host=db user=app password=*** dbname=logs",
        ),
        ("host=db password='a b\\'c' dbname=x", "host=db password=*** dbname=x"),
        ("https://h/p?b=1&access_token=abc&x=2", "https://h/p?b=1&access_token=***&x=2"),
        (
            "jdbc:postgresql://db/l?user=app&password=pw&ssl=1",
            "jdbc:postgresql://db/l?user=app&password=***&ssl=1",
        ),
        ("sslpassword = x", "sslpassword = ***"),
        # signed URLs: an Azure SAS `sig`, an S3 presigned `X-Amz-Signature`
        (
            "https://a.blob.core.windows.net/c?sv=2024&sig=AbC%2F&se=x",
            "https://a.blob.core.windows.net/c?sv=2024&sig=***&se=x",
        ),
        (
            "https://b/k?X-Amz-Signature=f00&X-Amz-Date=1",
            "https://b/k?X-Amz-Signature=***&X-Amz-Date=1",
        ),
        ("X-Auth-Key=zz X-Session=s", "X-Auth-Key=*** X-Session=***"),
        # a command line: `--name value` as well as `--name=value`
        ("vault-login --password Pw1 --token=T2 -v", "vault-login --password *** --token=*** -v"),
        ("get-keys --api-key K --sig S --region r", "get-keys --api-key *** --sig *** --region r"),
        # quoted values, as shlex takes them in a credentials_command
        ("get --password 'Pw 1' --x", "get --password *** --x"),
        ('get --password "Pw 1" y', "get --password *** y"),
        ('password="abc def" z', "password=*** z"),
        (
            "https://oss/o?OSSAccessKeyId=AK&Signature=s1g",
            "https://oss/o?OSSAccessKeyId=AK&Signature=***",
        ),
        # names that only look like one: left alone
        (
            "auth_version=v4 access_key_id=AK tls_key_file=/k",
            "auth_version=v4 access_key_id=AK tls_key_file=/k",
        ),
        ("--keyring x --monkey y --auth-method=ldap", "--keyring x --monkey y --auth-method=ldap"),
        ("unknown key=host session=2 auth=basic", "unknown key=host session=2 auth=basic"),
        (
            "SignatureVersion=1 x-log-signaturemethod=hmac-sha1",
            "SignatureVersion=1 x-log-signaturemethod=hmac-sha1",
        ),
        # where a secret is, not the secret
        ("c --token-file /run/t --password-file /p", "c --token-file /run/t --password-file /p"),
        # nothing secret: unchanged
        ("postgresql://app@db/logs", "postgresql://app@db/logs"),
        ("http://[::1]:8080/x", "http://[::1]:8080/x"),
        ("https://host/users/a@b", "https://host/users/a@b"),
        ("x://user:@h", "x://user:@h"),
        ("/data/dt=2026-01-01/hour=01", "/data/dt=2026-01-01/hour=01"),
        ("user=app dbname=logs", "user=app dbname=logs"),
        ("mailto:x@y", "mailto:x@y"),
        ("", ""),
    ],
)
def test_redact_text(text: str, shown: str) -> None:
    assert redact_text(text) == shown


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("bearer_token", "t0k", MASK),
        ("Authorization", "Bearer t0k", MASK),
        ("X-Api-Key", "k3y", MASK),
        ("sink_password", "pw", MASK),
        ("Cookie", "session=1", MASK),
        ("password", "", ""),  # empty: nothing to hide, and it shows it is unset
        ("url", "https://a:b@c/", "https://a:***@c/"),
        ("dsn", "host=h password=p", "host=h password=***"),
        ("path", "/var/lib/loghubd", "/var/lib/loghubd"),
        ("access_key_id", "AKID", "AKID"),  # an id, not a secret
        ("batch_size", 1000, 1000),
        ("gzip", True, True),
    ],
)
def test_redact_value(name: str, value: object, shown: object) -> None:
    assert redact_value(name, value) == shown


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("max_age_s", "60s", "a string '60s'"),
        ("rotate_bytes", -5, "an integer -5"),
        ("ratio", 0.5, "a number 0.5"),
        ("gzip", True, "true"),
        ("fields", ("a", "b"), "a list ['a', 'b']"),  # a frozen TOML array
        ("sink", MappingProxyType({"mode": ("x",)}), "a table {'mode': ['x']}"),  # a frozen table
        ("start", date(2024, 5, 1), "a date 2024-05-01"),
        pytest.param("path", "p" * 80, "a string '" + "p" * 56 + "...", id="cut to 60"),
        ("bearer_token", 123456, "an integer"),  # a secret's name: its value is not quoted
        ("headers", "Authorization: Bearer t0k", "a string"),  # a secret word in the value
        ("dsn", "host=h password=pw", "a string"),
        ("url", "https://a:pw@c/", "a string 'https://a:***@c/'"),
    ],
)
def test_described(name: str, value: object, shown: str) -> None:
    assert described(name, value) == shown


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("token", True),
        ("X-Auth-Token", True),
        ("PASSWORD", True),
        ("apikey", True),
        ("access_key_id", False),
        ("X-Auth", True),
        ("X-Access-Key", True),
        ("X-Signature", True),
        ("X-Session", True),
        ("sig", True),
        ("Signature", True),
        ("X-Amz-Signature", True),
        ("auth_version", False),
        ("primary_key", False),
        ("sort_key", False),
        ("session", False),
        ("SignatureVersion", False),
        ("tls_key_file", False),
        ("Session-Id", False),
        ("monkey", False),
        ("endpoint", False),
        ("headers", False),
    ],
)
def test_is_secret_name(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


_USER = st.text("abcdefghijklmnopqrstuvwxyz0123456789_.-", min_size=1, max_size=12)
# What a password in a configured URL can hold: anything but the characters that end a URL
# here (space, ?, #, quotes); @, :, / and % included.
_PASSWORD = st.text(
    st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters="?#'\""),
    min_size=1,
    max_size=24,
)
_HOST = st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z]{2,5}){0,2}(:[0-9]{2,5})?", fullmatch=True)
_PATH = st.from_regex(r"(/[a-zA-Z0-9_.=-]{0,8}){0,3}", fullmatch=True)


@given(
    scheme=st.sampled_from(["http", "https", "postgresql", "s3", "gs", "hdfs"]),
    user=_USER,
    password=_PASSWORD,
    host=_HOST,
    path=_PATH,
)
@example(scheme="s3", user="AKIA", password="a/b+c@d:e", host="bucket", path="/logs")
def test_a_url_password_never_shows(
    scheme: str, user: str, password: str, host: str, path: str
) -> None:
    url = f"{scheme}://{user}:{password}@{host}{path}"
    quoted = repr(password)[1:-1]  # as an error message's {path!r} shows it
    for text, written in ((url, password), (f"cannot write to {url!r}: denied", quoted)):
        shown = redact_text(text)
        assert shown == text.replace(f":{written}@", f":{MASK}@", 1)
        assert f"{host}{path}" in shown  # where it points stays readable
        assert redact_text(shown) == shown  # and masking again changes nothing


@given(
    name=st.sampled_from(["password", "sslpassword", "access_token", "client_secret", "pwd"]),
    value=st.text(
        st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters="&;#'\""),
        min_size=1,
        max_size=24,
    ),
)
def test_a_secret_pair_never_shows(name: str, value: str) -> None:
    text = f"host=db {name}={value} dbname=logs"
    assert redact_text(text) == f"host=db {name}={MASK} dbname=logs"
