"""Exceptions: one hyprof.Error subclass per status band of the library
(include/hyprof/core.h), each carrying the status and the library's message.
Argument and input errors are also ValueErrors, so that code written for
NumPy-style functions catches them."""

STATUS_NAMES = ["OK", "ARGUMENT", "INPUT", "IO", "FORMAT", "NOMEM", "NO_DEVICE",
                "DEVICE_MEMORY", "DEVICE", "NUMERIC", "CANCELLED", "INTERNAL"]


class Error(Exception):
    """A libhyprof call failed. `status` is the hyprof_status_t value,
    `status_name` its name (ARGUMENT, INPUT, ...), `message` the library's
    one-line message naming the operation and the bad value."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        self.status = self.STATUS if status is None else status
        self.status_name = STATUS_NAMES[self.status] if 0 <= self.status < len(STATUS_NAMES) \
            else str(self.status)

    STATUS = 11


class ArgumentError(Error, ValueError):
    """A parameter value is out of range or malformed (the message names it)."""
    STATUS = 1


class InputError(Error, ValueError):
    """The input cannot be processed (size, bands, all nodata, grids)."""
    STATUS = 2


class FileError(Error, OSError):
    """A file (model, endmember set) could not be read or written."""
    STATUS = 3


class FormatError(Error, ValueError):
    """A file was read but is not what it must be."""
    STATUS = 4


class OutOfMemory(Error, MemoryError):
    """Host memory is exhausted (or the cube would not fit)."""
    STATUS = 5


class NoDevice(Error):
    """backend='cuda' without CUDA in the library or without a usable device."""
    STATUS = 6


class DeviceMemoryError(Error):
    """Not enough device memory (backend='cuda' does not fall back)."""
    STATUS = 7


class DeviceError(Error):
    """A CUDA, cuBLAS or cuSOLVER call failed."""
    STATUS = 8


class NumericError(Error, ArithmeticError):
    """A numerical method failed (an eigensolver did not converge)."""
    STATUS = 9


class Cancelled(Error):
    """The progress callback asked to stop, or hyprof was cancelled."""
    STATUS = 10


class InternalError(Error):
    STATUS = 11


_BY_STATUS = {cls.STATUS: cls for cls in (ArgumentError, InputError, FileError, FormatError,
                                          OutOfMemory, NoDevice, DeviceMemoryError, DeviceError,
                                          NumericError, Cancelled, InternalError)}


def error_for(status, message):
    """The exception for a failed call's status and message."""
    return _BY_STATUS.get(status, Error)(message, status)
