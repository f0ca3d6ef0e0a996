"""API errors the broker raises; server.py maps them to gRPC status codes.

Kept free of grpc so the broker can be tested without a server.
"""

from __future__ import annotations


class ApiError(Exception):
    """An error the real service would answer with a status code."""

    code = "UNKNOWN"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(ApiError):
    code = "NOT_FOUND"


class AlreadyExists(ApiError):
    code = "ALREADY_EXISTS"


class InvalidArgument(ApiError):
    code = "INVALID_ARGUMENT"


class FailedPrecondition(ApiError):
    code = "FAILED_PRECONDITION"


class Unimplemented(ApiError):
    code = "UNIMPLEMENTED"
