"""Wire shapes of the native stdio dialect: the kernel's model itself.

A line in is one :data:`kernel.model.Command` as JSON (its ``type`` tag and fields
exactly as in :mod:`kernel.model`); a line out is one :data:`kernel.model.Event` or
:data:`kernel.model.Reply`. Nothing is translated (docs/stdio.md), so this module
only names the decoders and the encoder of those lines. Decoding is guarded
(:mod:`kernel.jsonwire`): input nested too deeply is a ``DecodeError``.
"""

from __future__ import annotations

from typing import Any, get_args

import msgspec

from kernel import JsonDecoder
from kernel import model as m

#: What a line out carries.
Outgoing = m.Event | m.Reply

#: A line in -> a command (``msgspec.ValidationError`` when it is JSON but no command).
decode_command = JsonDecoder[m.Command](m.Command).decode
#: A line in as plain JSON, to explain why it is no command or to find its ``request_id``.
decode_any = JsonDecoder[Any]().decode
#: A line out (without its newline).
encode = msgspec.json.Encoder().encode

#: The ``type`` tags of the commands, for error messages.
COMMAND_TAGS = sorted(str(kind.__struct_config__.tag) for kind in get_args(m.Command))
