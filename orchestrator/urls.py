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
# A secret by its key's name, in any syntax a log or a dumped config writes it: `password=...` in a driver's error
# text (libpq echoes connection options), `WANDB_API_KEY=...` from an environment dump, `api_key: sk-...` in YAML,
# `{'api_key': '...'}` from a repr, `"mlflow_tracking_token": "..."` in JSON, `X-Api-Key: ...` as a header. A key
# names a secret by one of these words (not `key` alone: `keypoints: 17` is no secret).
_SECRET_WORDS = (r"password|passwd|passphrase|pwd|secret|token|credential|"
                 r"api[_-]?key|private[_-]?key|access[_-]?key|secret[_-]?key|session[_-]?key")
# a mapping's key that names a secret (ui/store.mask): the same words, and `auth`, `Authorization`, `Cookie`
SECRET_KEY_NAME = re.compile(rf"{_SECRET_WORDS}|(^|[_-])auth($|[_-])|authorization|cookie", re.IGNORECASE)
_VALUE = r"'[^']*'|\"[^\"]*\"|[^\s,;}\]]+"
_INLINE_SECRET = re.compile(rf"(\b[\w-]*(?:{_SECRET_WORDS})[\w-]*)(['\"]?\s*[=:]\s*)({_VALUE})", re.IGNORECASE)
# headers whose whole value is a credential (`Authorization: token ghp_...`, `Cookie: session=...`): masked to the
# end of the line, or of the quoted value in a repr of a headers mapping
_HEADER_SECRET = re.compile(r"(\b(?:proxy-)?authorization|\b(?:set-)?cookie)(['\"]?\s*[=:]\s*)('[^']*'|\"[^\"]*\"|[^\n]+)",
                            re.IGNORECASE)
# an HTTP credential however it is labelled: `Bearer ...` always; `Basic ...` when the value looks like a token (a
# digit, an `=`, or mixed case), so that plain words ("basic augmentation") stay
_AUTH_SCHEME = re.compile(r"\b(?:([Bb]earer|BEARER)|([Bb]asic|BASIC)(?=\s+\S*(?:\d|=|[a-z]\S*[A-Z]|[A-Z]\S*[a-z])))"
                          r"(\s+)([A-Za-z0-9._~+/=-]{8,})")


def _masked(m: re.Match) -> str:
    """The key and its separator kept, the value masked (in its quotes, when it had them)."""
    key, sep, value = m.group(1), m.group(2), m.group(3)
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{key}{sep}{quote}{MASK}{quote}"


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
    text = _HEADER_SECRET.sub(_masked, text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m.group(1) or m.group(2)}{m.group(3)}{MASK}", text)
    return _INLINE_SECRET.sub(_masked, text)


PG_DRIVERS = (("psycopg", "postgresql+psycopg"), ("psycopg2", "postgresql+psycopg2"))


def with_installed_pg_driver(url: str) -> str:
    """`postgresql://` means psycopg (3) to SQLAlchemy 2.1+ and psycopg2 to older ones: the URL with whichever
    driver is installed named, so a plain URL works either way (a sweep's storage, an MLflow store). Any other
    URL, or one that names its driver, is returned as it is."""
    import importlib.util

    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "postgresql":
        return url
    for module, driver in PG_DRIVERS:
        if importlib.util.find_spec(module) is not None:
            return f"{driver}://{rest}"
    return url
