"""What the mail facade raises (synedre/mail/outbound.py): one family, so a caller catches
`OutboundError` for "no mail", and `MailNotSent` alone for "nothing left, a later call may send"."""
from __future__ import annotations


class OutboundError(RuntimeError):
    pass


class FounderMissing(OutboundError):
    """No founder in the directory: there is nobody Atlas may write to."""


class UnknownMessage(OutboundError):
    pass


class MailMaybeSent(OutboundError):
    """The connection was lost during DATA: the server may have taken the mail. The one
    case that is not 'nothing left'; `send_to_founder` turns it into `send_unknown`."""


class RecapDeferred(RuntimeError):
    """A recap or an alert could not leave yet (SMTP refused before DATA, IMAP down, another
    execution sending it): its task retries later (synedre/stages/recap.py)."""


class MailNotSent(OutboundError):
    """Nothing left the mailbox; calling again is safe. `transient` says whether to retry."""

    def __init__(self, reason: str, *, transient: bool, code: int | None = None):
        super().__init__(reason)
        self.transient = transient
        self.code = code
