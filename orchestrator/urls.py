"""Storage URLs shown or stored without their secrets, for every credential form SQLAlchemy accepts.

Light (no sqlalchemy import): `doctor`, `sweep --dry-run`, error lines and the sweep summary all
print storage URLs, so the redaction must not depend on the URL parsing the way SQLAlchemy does.
The forms: `user:password@host` (a password may hold an unescaped '@' or '/': everything up to the
last '@' of the authority is credentials), `%`-escaped passwords, and secrets in the query string
(`?password=`, `sslpassword=`, libpq/pymysql variants such as `passwd=`, tokens and keys)."""

from __future__ import annotations

import re

MASK = "***"
# query keys whose values are secrets (case-insensitive substrings)
_SECRET_KEY = re.compile(r"pass|pwd|secret|token|key|credential|auth", re.IGNORECASE)
_QUERY_PAIR = re.compile(r"([?&;])([^=&;#]+)=([^&;#]*)")
# `password=...` / `password: ...` inside a driver's error text (libpq echoes connection options), an
# environment dump's `WANDB_API_KEY=...`, a config's `api_key: sk-...`
_INLINE_SECRET = re.compile(r"\b(\w*(?:password|passwd|pwd|secret|token|api_?key|credential)\w*)(\s*[=:]\s*)"
                            r"('[^']*'|\"[^\"]*\"|\S+)", re.IGNORECASE)
# an HTTP credential however it is labelled: `Authorization: Bearer ...`, `Basic ...`: a token-like value (a
# digit, an `=`, or mixed case), so that plain words ("basic augmentation") stay
_AUTH_SCHEME = re.compile(r"\b([Bb]earer|[Bb]asic|BEARER|BASIC)(\s+)(?=\S*(?:\d|=|[a-z]\S*[A-Z]|[A-Z]\S*[a-z]))"
                          r"([A-Za-z0-9._~+/=-]{8,})")


def _credentials(url: str) -> tuple[str, str | None, str, str | None]:
    """(scheme, credentials, the rest of the authority and path, query): the credentials run up to the
    LAST '@' before the query (a password may hold an unescaped '@' or '/'); None for SQLite paths,
    which may hold an '@' but never credentials."""
    head, sep, query = url.partition("?")
    scheme, has_scheme, rest = head.partition("://")
    if not has_scheme or "@" not in rest or scheme.lower().startswith("sqlite"):
        return scheme, None, head, query if sep else None
    creds, _, host_part = rest.rpartition("@")
    return scheme, creds, host_part, query if sep else None


def redact_url(url: str) -> str:
    """The URL with its password and secret query values replaced by ***; user, host, port and
    database kept so the user recognises it."""
    if not isinstance(url, str):
        return url
    scheme, creds, rest, query = _credentials(url)
    if creds is None:
        head = rest
    else:
        user = creds.split(":", 1)[0]
        head = f"{scheme}://{user}:{MASK}@{rest}" if ":" in creds else f"{scheme}://{user}@{rest}"
    return head if query is None else head + _QUERY_PAIR.sub(_mask_pair, "?" + query)


def _mask_pair(m: re.Match) -> str:
    sep, key, value = m.groups()
    return f"{sep}{key}={MASK}" if _SECRET_KEY.search(key) else m.group(0)


def secrets_in(url: str) -> list[str]:
    """The secret fragments of a URL as a driver may echo them: the password (raw, %-decoded, and each
    piece between '@' or '/' that a parser may have taken for a host) and secret query values."""
    from urllib.parse import unquote

    found: list[str] = []
    _, creds, _, query = _credentials(url)
    if creds is not None and ":" in creds:
        password = creds.split(":", 1)[1]
        found += [password, unquote(password)] + re.split(r"[@/]", password)
    for m in _QUERY_PAIR.finditer("?" + (query or "")):
        if _SECRET_KEY.search(m.group(2)):
            found += [m.group(3), unquote(m.group(3))]
    return sorted({f for f in found if len(f) >= 3}, key=len, reverse=True)


def redact_text(text: str, *urls: str) -> str:
    """Free text (an error message) with each URL redacted, the URLs' secret fragments masked wherever
    they appear (a driver may echo a mis-parsed password as a host name), and `password=...` masked."""
    for url in urls:
        if url:
            text = text.replace(url, redact_url(url))
            for fragment in secrets_in(url):
                text = text.replace(fragment, MASK)
    text = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    return _INLINE_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
