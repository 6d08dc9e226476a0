"""OpenFang's session ids (a pure piece of the codec): UUIDs on the wire, whatever the kernel holds.

OpenFang parses every session id in a path as a UUID (``routes.rs``) and shows them in the
hyphenated ``8-4-4-4-12`` form; its clients store and send back what they were shown. The
kernel's sessions are shared by every dialect, and some have other ids: stdio's ``notes``,
the seed's ``test_session``, the 32-hex ids this transport made before it followed OpenFang.
So each kernel id has one *public* id here:

* a kernel id that is a UUID in any spelling is shown in its canonical form;
* any other id is shown as the UUID derived from it (:func:`alias`, a name-based UUID 5),
  so ``notes`` is listed, switched to and deleted under one stable UUID.

Sessions this transport creates get a random UUID, already canonical. A name in a body or a
frame (``session_id``, our extension) may be any id: a UUID is taken as a public id, any
other name as the kernel's own id (the same session in every dialect), shown by its alias.
"""

from __future__ import annotations

import uuid

#: The namespace of the aliases: fixed, so an alias is the same in every process and release.
ALIAS_NAMESPACE = uuid.UUID("6f70656e-6661-4e67-8073-657373696f6e")
#: Longer than any spelling ``uuid.UUID`` accepts (``urn:uuid:`` + 36): refused without parsing.
_MAX_UUID_CHARS = 45


def canonical_uuid(raw: str) -> str | None:
    """``raw`` as a canonical lowercase hyphenated UUID, or None when it is not a UUID."""
    if len(raw) > _MAX_UUID_CHARS:
        return None
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        return None


def alias(kernel_id: str) -> str:
    """The UUID that stands for a kernel id that is not one."""
    return str(uuid.uuid5(ALIAS_NAMESPACE, kernel_id))


def public_session_id(kernel_id: str) -> str:
    """What OpenFang clients are shown (and send back) for a kernel session id."""
    return canonical_uuid(kernel_id) or alias(kernel_id)


def new_session_id() -> str:
    """A new session's id: a random UUID, canonical, so kernel id and public id are one."""
    return str(uuid.uuid4())
