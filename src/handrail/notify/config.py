"""The ``[notifications]`` table of a policy file (SPEC §5.4): endpoints kept beside the policy.

::

    [notifications]
    public_url = "https://handrail.example.com"     # links in payloads, Slack and mail

    [notifications.webhooks.ops]                    # an endpoint named "ops"
    url = "https://hooks.example.com/handrail"
    events = ["review.requested", "review.decided"]
    secret_env = "OPS_WEBHOOK_SECRET"               # or secret = "whsec_..."

    [notifications.slack]
    channel = "C0123456789"
    events = ["review.requested", "review.decided", "review.expired"]
    [notifications.slack.users]                     # Slack user id = handrail identity
    U0123ABCD = "alice"

    [notifications.email]
    host = "smtp.example.com"
    port = 587
    starttls = true
    username = "handrail"
    password_env = "SMTP_PASSWORD"
    from = "handrail@example.com"
    events = ["review.requested"]
    [notifications.email.addresses]                 # handrail identity = address
    alice = "alice@example.com"

Endpoints of a file have the ids ``file:webhook:NAME``, ``file:slack`` and
``file:email``; loading the file again replaces them in place (their place in the feed
stays), and one the file no longer names stops receiving. Secrets are read from the
environment when the file names a variable (``secret_env``, ``password_env``), so the
file can be committed. Every key is checked; an unknown one is an error naming it.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from handrail.notify.channels import Endpoint
from handrail.notify.events import check_event_types
from handrail.review.policy_file import PolicyFile

__all__ = [
    "DEFAULT_EVENTS",
    "NotifyConfigError",
    "NotifySettings",
    "apply_settings",
    "check_url",
    "notify_settings",
    "parse_notifications",
]

DEFAULT_EVENTS = ("review.requested", "review.decided", "review.expired", "review.outcome_unknown")
"""What an endpoint receives when it names no events: every review event."""

_TOP = frozenset({"public_url", "webhooks", "slack", "email"})
_WEBHOOK = frozenset({"url", "events", "secret", "secret_env"})
_SLACK = frozenset({"channel", "events", "users"})
_EMAIL = frozenset(
    {"host", "port", "username", "password_env", "from", "starttls", "tls", "timeout", "events", "addresses"}
)
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_T = TypeVar("_T")
_ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+")  # plain ASCII


class NotifyConfigError(ValueError):
    """A ``[notifications]`` key that cannot be used: ``key`` is its dotted path."""

    def __init__(self, key: tuple[str, ...], problem: str) -> None:
        super().__init__(problem)
        self.key = key


@dataclass(frozen=True)
class NotifySettings:
    """What a policy file says about notifications: ``public_url`` (None: the address the
    service listens on), its ``endpoints`` and ``slack_users`` (Slack user id -> identity)."""

    public_url: str | None = None
    endpoints: tuple[Endpoint, ...] = ()
    slack_users: Mapping[str, str] = field(default_factory=dict)


def notify_settings(policy: PolicyFile) -> NotifySettings | None:
    """The notification settings of a loaded policy file (None when it has no
    ``[notifications]``); a key that cannot be used is a :class:`PolicyFileError` naming
    the file, the line and the key.

    Example::

        settings = notify_settings(load_policy_file("handrail.toml"))
    """
    if policy.notifications is None:
        return None
    try:
        return parse_notifications(policy.notifications)
    except NotifyConfigError as exc:
        raise policy.error(exc.key, str(exc)) from None


def check_url(url: Any, where: str = "url") -> str:
    """An ``http(s)`` URL with a host, or ``ValueError`` saying what was expected."""
    if not isinstance(url, str) or len(url) > 2000:
        raise ValueError(f"{where} must be an http:// or https:// URL")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c in url for c in " \r\n\t\x00"):
        raise ValueError(f"{where} must be an http:// or https:// URL with a host, got {url!r:.200}")
    return url


def parse_notifications(table: Any) -> NotifySettings:
    """The settings of a ``[notifications]`` table; :class:`NotifyConfigError` names the
    first key that is wrong."""
    at: tuple[str, ...] = ("notifications",)
    _table(table, at, _TOP)
    public_url = table.get("public_url")
    if public_url is not None:
        public_url = _check(lambda: check_url(public_url, "public_url"), (*at, "public_url"))
    endpoints: list[Endpoint] = []
    hooks = table.get("webhooks", {})
    if not isinstance(hooks, dict):
        raise NotifyConfigError((*at, "webhooks"), "must be a table of [notifications.webhooks.NAME] tables")
    for name, hook in hooks.items():
        where = (*at, "webhooks", name)
        if not _NAME.fullmatch(name):
            raise NotifyConfigError(where, "an endpoint's name is 1-64 letters, digits or '_.-'")
        _table(hook, where, _WEBHOOK)
        url = _check(functools.partial(check_url, hook.get("url"), "url"), (*where, "url"))
        secret = _secret(hook, where)
        events = _events(hook, where)
        endpoints.append(
            Endpoint(f"file:webhook:{name}", "webhook", url, events, ((secret, None),), {}, "file")
        )
    users: dict[str, str] = {}
    slack = table.get("slack")
    if slack is not None:
        where = (*at, "slack")
        _table(slack, where, _SLACK)
        channel = slack.get("channel")
        if not isinstance(channel, str) or not re.fullmatch(r"[A-Z0-9]{2,32}", channel):
            raise NotifyConfigError((*where, "channel"), "must be a Slack channel id such as C0123456789")
        mapped = slack.get("users", {})
        if not isinstance(mapped, dict):
            raise NotifyConfigError((*where, "users"), 'must be a table of SLACK_USER_ID = "identity"')
        for user, identity in mapped.items():
            if not re.fullmatch(r"[UW][A-Z0-9]{2,32}", user) or not isinstance(identity, str) or not identity:
                raise NotifyConfigError(
                    (*where, "users", user), "maps a Slack user id (U...) to a handrail identity (a string)"
                )
            users[user] = identity
        endpoints.append(Endpoint("file:slack", "slack", channel, _events(slack, where), (), {}, "file"))
    email = table.get("email")
    if email is not None:
        endpoints.append(_email(email, (*at, "email")))
    return NotifySettings(public_url, tuple(endpoints), users)


def _email(table: Any, where: tuple[str, ...]) -> Endpoint:
    _table(table, where, _EMAIL)
    options: dict[str, Any] = {}
    host = table.get("host")
    if not isinstance(host, str) or not host:
        raise NotifyConfigError((*where, "host"), 'must name the SMTP server, e.g. "smtp.example.com"')
    options["host"] = host
    port = table.get("port", 587)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise NotifyConfigError((*where, "port"), "must be a port number (1-65535)")
    options["port"] = port
    sender = table.get("from")
    if not isinstance(sender, str) or not _ADDRESS.fullmatch(sender):
        raise NotifyConfigError(
            (*where, "from"), 'must be the sender\'s address, e.g. "handrail@example.com"'
        )
    options["from"] = sender
    for key in ("starttls", "tls"):
        if key in table:
            if not isinstance(table[key], bool):
                raise NotifyConfigError((*where, key), "must be true or false")
            options[key] = table[key]
    if options.get("starttls") and options.get("tls"):
        raise NotifyConfigError((*where, "tls"), "choose tls (implicit TLS) or starttls, not both")
    if "username" in table:
        if not isinstance(table["username"], str):
            raise NotifyConfigError((*where, "username"), "must be a string")
        options["username"] = table["username"]
    if "password_env" in table:
        name = table["password_env"]
        if not isinstance(name, str) or name not in os.environ:
            raise NotifyConfigError(
                (*where, "password_env"),
                f"names the environment variable that holds the password; {name!r} is not set",
            )
        options["password_env"] = name
    timeout = table.get("timeout", 30)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 600:
        raise NotifyConfigError((*where, "timeout"), "must be seconds, more than 0 and at most 600")
    options["timeout"] = float(timeout)
    addresses = table.get("addresses", {})
    if not isinstance(addresses, dict):
        raise NotifyConfigError((*where, "addresses"), 'must be a table of identity = "address"')
    for identity, address in addresses.items():
        if not isinstance(address, str) or not _ADDRESS.fullmatch(address):
            raise NotifyConfigError((*where, "addresses", identity), "must be a mail address")
    options["addresses"] = dict(addresses)
    return Endpoint("file:email", "email", "", _events(table, where), (), options, "file")


def _table(value: Any, where: tuple[str, ...], known: frozenset[str]) -> None:
    if not isinstance(value, dict):
        raise NotifyConfigError(where, "must be a table")
    unknown = sorted(set(value) - known)
    if unknown:
        raise NotifyConfigError(
            (*where, unknown[0]), f"unknown key; this table takes {', '.join(sorted(known))}"
        )


def _events(table: Mapping[str, Any], where: tuple[str, ...]) -> tuple[str, ...]:
    if "events" not in table:
        return DEFAULT_EVENTS
    return _check(lambda: check_event_types(table["events"], "events"), (*where, "events"))


def _secret(table: Mapping[str, Any], where: tuple[str, ...]) -> str:
    if "secret" in table and "secret_env" in table:
        raise NotifyConfigError((*where, "secret_env"), "give secret or secret_env, not both")
    if "secret_env" in table:
        name = table["secret_env"]
        value = os.environ.get(name) if isinstance(name, str) else None
        if not value:
            raise NotifyConfigError((*where, "secret_env"), f"the environment variable {name!r} is not set")
        secret, key = value, "secret_env"
    elif "secret" in table:
        secret, key = table["secret"], "secret"
    else:
        raise NotifyConfigError(where, "needs secret_env (or secret): the key deliveries are signed with")
    from handrail.notify.webhooks import check_secret

    return _check(lambda: check_secret(secret), (*where, key))


def _check(make: Callable[[], _T], key: tuple[str, ...]) -> _T:
    try:
        return make()
    except ValueError as exc:
        raise NotifyConfigError(key, str(exc)) from None


def apply_settings(outbox: Any, settings: NotifySettings, start: str | None, db: Any) -> None:
    """Keep a policy file's endpoints in ``outbox`` (``Outbox``): each added or replaced in
    place (a new one starts after ``start``, the feed's end now), and the file's endpoints
    it no longer names removed; its Slack users kept in the mapping table."""
    for endpoint in settings.endpoints:
        secret = endpoint.secrets[0][0] if endpoint.secrets else None
        outbox.add_endpoint(
            endpoint.kind,
            endpoint.target,
            endpoint.events,
            start_after=start,
            secret=secret,
            options=endpoint.options,
            id=endpoint.id,
            source="file",
        )
    outbox.keep_file_endpoints([endpoint.id for endpoint in settings.endpoints])
    try:
        from handrail.server.slack_users import SlackUsers
    except ImportError:  # the slack extra is not installed: a file with Slack users says so at load
        return
    SlackUsers(db).keep_file(dict(settings.slack_users))
