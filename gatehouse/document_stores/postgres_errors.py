"""
What the PostgreSQL store says when its database cannot be used: to the operator (the log, the CLI) one line naming
the server without its password, the cause and the fix; to an API caller one line naming none of the database's user,
host, port or name (`StoreUnavailableError.public`); and one warning per outage in a server's log, not one per
request or per poll.

The password is taken out of whatever is shown, not only out of the URLs this module formats: libpq quotes what it
could not parse (the whole URL when the scheme is misspelt, a bad percent token, a host it could not resolve), and a
password holding an unencoded `@`, `/`, `?` or `#` is cut there by the parsers, its tail read as the host or the path.
So every reading of the password is a secret (libpq's, up to the first `@` or `/`; Python's, up to the last `@` of the
host part; and the longest, up to the last `@` of the URL; each also percent-decoded), and so is each piece of it
between those characters (of 3 characters or more): each is replaced by `***` in the driver's message.

Usage:
```python
from gatehouse.document_stores.postgres_errors import report_outage, scrub, shown, unavailable

shown("postgresql://gatehouse:s3cret@db/gatehouse")                  # 'postgresql://gatehouse:***@db/gatehouse'
scrub("failed to resolve host 'cret@db'", "postgresql://u:se@cret@db/x")   # "failed to resolve host '***@db'"
error = unavailable(url, driver_error, "searching")   # StoreUnavailableError: .public for callers, str() for the log
report_outage(error)                                  # one warning until the database is used again (`outage_over`)
```
"""

import logging
import re
import threading
from urllib.parse import unquote

import psycopg

from gatehouse.document_stores.errors import StoreUnavailableError

logger = logging.getLogger("gatehouse.document_stores.postgres")

#: `password=...` in a key=value connection string or a URL's query (quoted, or up to a space or `&`).
PASSWORD_PARAMETER = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&]*)", re.IGNORECASE)
CUT_AT = re.compile(r"[@/?#:\[\] ]")  # where a parser may cut an unencoded password
SHORTEST_PIECE = 3  # shorter pieces of a password are not searched for (they would hide unrelated text)
#: What a login refused by the server says (libpq passes the server's FATAL line on).
LOGIN_REFUSED = re.compile(r"password authentication failed|no password supplied|role \".*\" does not exist|"
                           r"is not permitted to log in|no pg_hba\.conf entry|authentication failed", re.IGNORECASE)
NO_DATABASE = re.compile(r"database \".*\" does not exist")

#: What an API caller reads, by cause: nothing of the database's user, host, port or name.
CALLER_UNREACHABLE = "the database cannot be reached right now; try again shortly"
CALLER_LOGIN = "the server cannot log in to its database: its operator must check the database credentials"
CALLER_SETTINGS = "the server's database settings are invalid: its operator must fix them"


def _url_readings(url: str) -> tuple[str | None, ...]:
    """The password of a URL as libpq, Python and the longest reading take it (None: no password), else ()."""
    _, separator, rest = url.strip().partition("://")
    if not separator:
        return ()
    libpq = re.match(r"[^@/]*@", rest)
    host_part = re.split(r"[/?#]", rest, maxsplit=1)[0]
    readings = []
    for userinfo in (libpq.group(0)[:-1] if libpq else "", host_part.rpartition("@")[0], rest.rpartition("@")[0]):
        _, colon, password = userinfo.partition(":")
        readings.append(password if colon and password else None)
    return tuple(readings)


def _readings(url: str) -> list[str]:
    """Every password that may be read in `url`: its URL readings and its `password=` parameters, as written."""
    parameters = [match.group(2).strip("'") for match in PASSWORD_PARAMETER.finditer(url)]
    return [*parameters, *(reading for reading in _url_readings(url) if reading)]


def _secrets(url: str) -> list[str]:
    """Every string that may show the password of `url` (longest first)."""
    readings = {text for password in _readings(url) for text in (password, unquote(password))}
    secrets = {text for text in readings if not any(text != other and text in other for other in readings)}
    for text in readings:  # a reading inside a longer one is a piece of it, as are the parts between cut characters
        secrets.update(piece for piece in (text, *CUT_AT.split(text)) if len(piece) >= SHORTEST_PIECE)
    secrets.discard("")
    return sorted(secrets, key=len, reverse=True)


def shown(url: str) -> str:
    """The URL (or key=value connection string) with its password, however it is written, as `***`."""
    text = PASSWORD_PARAMETER.sub(r"\1***", url)
    scheme, separator, rest = text.partition("://")
    if separator and "@" in rest:
        userinfo, _, host = rest.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        text = f"{scheme}://{user}{':***' if colon else ''}@{host}"
    return text


def scrub(text: str, url: str) -> str:
    """`text` (a driver's message) without any reading of the password of `url`; the URL itself shown by `shown`."""
    if not url:
        return text
    text = text.replace(url, shown(url)).replace(url.strip(), shown(url.strip()))
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return text


def misread(url: str) -> bool:
    """Whether libpq reads another password in the URL than it holds (an unencoded `@`, `/` or space in it)."""
    readings = _url_readings(url)
    return bool(readings) and (readings[0] != readings[2] or " " in (readings[2] or ""))


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type when it has none)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def unavailable(url: str, error: BaseException, doing: str, *, setting: str = "GATEHOUSE_POSTGRES_URL",
                what: str = "the PostgreSQL store") -> StoreUnavailableError:
    """
    The error for the database at `url` that could not be used while `doing`: one line for the log and the CLI
    (`str`: the server without its password, the driver's reason scrubbed, the fix), one for API callers (`public`).

    :param setting: The variable that names the URL, in the fix.
    :param what: What the URL is, in the message (`the PostgreSQL read URL`).
    """
    detail = scrub(first_line(error), url)
    public = CALLER_UNREACHABLE
    encode = "the password's @ / ? # and spaces percent-encoded (%40 %2F %3F %23 %20)"
    if isinstance(error, psycopg.ProgrammingError):  # libpq could not parse the URL
        fix, public = (f"write {setting} as postgresql://user:password@host:port/database"
                       f"{', with ' + encode if misread(url) else ''}", CALLER_SETTINGS)
    elif misread(url):
        fix, public = f"write {setting} with {encode}", CALLER_SETTINGS
    elif LOGIN_REFUSED.search(detail):
        fix, public = (f"check the user and password in {setting} (and that the server's pg_hba.conf lets this "
                       "user in from here)", CALLER_LOGIN)
    elif NO_DATABASE.search(detail):
        fix = f"create that database or fix its name in {setting}"
    else:
        fix = f"start the server or point {setting} at one that runs"
    return StoreUnavailableError(f"{what} at {shown(url)} cannot be used ({doing}: {detail}): {fix}",
                                 public=public, outage=shown(url))


_WARNED: dict[str, str] = {}  # outage (a URL as shown) -> the warning logged for it
_WARNED_LOCK = threading.Lock()


def report_outage(error: StoreUnavailableError) -> None:
    """Log `error` as a warning once per outage of its database (until `outage_over`); an error of no outage always."""
    key = error.outage
    if key is not None:
        with _WARNED_LOCK:
            if key in _WARNED:
                return
            _WARNED[key] = str(error)
    logger.warning("%s", error)


def outage_over(url: str) -> None:
    """The database at `url` was used: an outage reported for it is over (logged once)."""
    if not _WARNED:  # the common case: no lock taken
        return
    with _WARNED_LOCK:
        ended = _WARNED.pop(shown(url), None)
    if ended is not None:
        logger.info("%s can be used again", shown(url))
