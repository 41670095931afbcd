"""SLS error codes as exception types (PROTOCOL.md §15).

The server raises them to answer `{"errorCode", "errorMessage"}` with the right HTTP status; the
client turns an error answer back into the same type with `from_response`, so both sides share
one catalogue. Misspelt codes the real service is known to use (`ConsumerNotExsit`,
`ShardNotExsit`) map to the same classes as the correct spellings.
"""

from __future__ import annotations

from typing import ClassVar


class SlsError(Exception):
    """An SLS error answer: HTTP status, error code and message."""

    code: ClassVar[str] = "InternalServerError"
    status: ClassVar[int] = 500

    def __init__(
        self,
        message: str = "",
        *,
        status: int | None = None,
        code: str | None = None,
        request_id: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id
        if status is not None:
            self.http_status = status
        else:
            self.http_status = type(self).status
        self.error_code = code or type(self).code

    def __str__(self) -> str:
        rid = f" (request {self.request_id})" if self.request_id else ""
        return f"{self.error_code}: {self.message}{rid}"

    @property
    def retryable(self) -> bool:
        """Worth trying again later: the service is down, overloaded or timed out."""
        return self.http_status >= 500 or self.error_code in (
            "RequestTimeout",
            "ServerBusy",
            "ReadQuotaExceed",
            "ShardReadQuotaExceed",
            "WriteQuotaExceed",
            "ShardWriteQuotaExceed",
        )


_BY_CODE: dict[str, type[SlsError]] = {}


def _define(
    name: str, status: int, *aliases: str, base: type[SlsError] = SlsError
) -> type[SlsError]:
    cls = type(name, (base,), {"code": name, "status": status, "__module__": __name__})
    for code in (name, *aliases):
        _BY_CODE[code] = cls
    return cls


class OwnershipLost(SlsError):
    """This consumer no longer owns the shard: stop touching it (fencing)."""

    status = 400


# Generic request problems
ParameterInvalid = _define("ParameterInvalid", 400, "InvalidParameter", "BadRequest")
MissingContentLength = _define("MissingContentLength", 411)
InvalidContentType = _define("InvalidContentType", 415)
MissingBodyRawSize = _define("MissingBodyRawSize", 400)
InvalidBodyRawSize = _define("InvalidBodyRawSize", 400)
InvalidCompressType = _define("InvalidCompressType", 400)
MissingAPIVersion = _define("MissingAPIVersion", 400)
InvalidAPIVersion = _define("InvalidAPIVersion", 400)
MissingHost = _define("MissingHost", 400)
MissingDate = _define("MissingDate", 400)
InvalidDateFormat = _define("InvalidDateFormat", 400)
RequestTimeTooSkewed = _define("RequestTimeTooSkewed", 400, "RequestTimeExpired")
MethodNotAllowed = _define("MethodNotAllowed", 405)
NotSupported = _define("NotSupported", 400)
InternalServerError = _define("InternalServerError", 500)
ServerBusy = _define("ServerBusy", 503)
RequestTimeout = _define("RequestTimeout", 500)
# Authentication and authorisation
MissAccessKeyId = _define("MissAccessKeyId", 400)
Unauthorized = _define("Unauthorized", 401)
SignatureNotMatch = _define("SignatureNotMatch", 401)
InvalidAccessKeyId = _define("InvalidAccessKeyId", 401, "InvalidAccessKeyId.NotFound")
MissingSignatureMethod = _define("MissingSignatureMethod", 400)
InvalidSignatureMethod = _define("InvalidSignatureMethod", 400)
SecurityTokenExpired = _define("SecurityTokenExpired", 401, "SecurityToken.Expired")
# Projects and logstores
ProjectNotExist = _define("ProjectNotExist", 404)
ProjectAlreadyExist = _define("ProjectAlreadyExist", 400)
LogStoreNotExist = _define("LogStoreNotExist", 404)
LogStoreAlreadyExist = _define("LogStoreAlreadyExist", 400)
LogStoreInfoInvalid = _define("LogStoreInfoInvalid", 400, "LogstoreInfoInvalid")
LogStoreWithoutShard = _define("LogStoreWithoutShard", 400)
# Data
ShardNotExist = _define("ShardNotExist", 400, "ShardNotExsit", base=OwnershipLost)
InvalidCursor = _define("InvalidCursor", 400)
PostBodyInvalid = _define("PostBodyInvalid", 400)
PostBodyTooLarge = _define("PostBodyTooLarge", 400)
PostBodyUncompressError = _define("PostBodyUncompressError", 400)
InvalidTimestamp = _define("InvalidTimestamp", 400)
InvalidEncoding = _define("InvalidEncoding", 400)
InvalidKey = _define("InvalidKey", 400)
ShardWriteQuotaExceed = _define("ShardWriteQuotaExceed", 403, "WriteQuotaExceed")
ShardReadQuotaExceed = _define("ShardReadQuotaExceed", 403, "ReadQuotaExceed")
# Consumer groups
ConsumerGroupAlreadyExist = _define("ConsumerGroupAlreadyExist", 400)
ConsumerGroupNotExist = _define("ConsumerGroupNotExist", 404)
ConsumerGroupQuotaExceed = _define("ConsumerGroupQuotaExceed", 400)
JsonInfoInvalid = _define("JsonInfoInvalid", 400)
NotExistConsumerWithBody = _define("NotExistConsumerWithBody", 400)
InvalidShardCheckPoint = _define("InvalidShardCheckPoint", 400)
ConsumerNotExist = _define("ConsumerNotExist", 400, "ConsumerNotExsit", base=OwnershipLost)
ConsumerNotMatch = _define("ConsumerNotMatch", 400, base=OwnershipLost)


def from_response(status: int, code: str, message: str, request_id: str = "") -> SlsError:
    """The typed exception for an error answer; unknown codes become a plain SlsError."""
    cls = _BY_CODE.get(code, SlsError)
    return cls(message, status=status, code=code, request_id=request_id)
