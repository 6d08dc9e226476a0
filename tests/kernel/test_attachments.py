"""The kernel's one attachment policy (kernel/attachments.py): text files by their bytes, images
stay images, anything else one clear ``invalid_request``; checked where prompts and saved
history enter the kernel. tests/transports/test_attachments.py sends the same files through
every dialect."""

from __future__ import annotations

import pytest

from kernel import admit_part, admit_parts, file_text, message_from_parts
from kernel import model as m
from kernel.attachments import MAX_FILE_BYTES, MAX_PARTS
from kernel.testing import ScriptedProvider, running_kernel

from .helpers import run_events

#: A PDF's header and the binary comment line every PDF writer puts after it.
PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog >>\nendobj\n"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
TEXT = "héllo, wörld\n".encode()


def refusal(part: m.ContentPart) -> m.KernelError:
    with pytest.raises(m.KernelError) as caught:
        admit_part(part)
    return caught.value


def test_text_files_are_judged_by_their_bytes() -> None:
    assert admit_part(m.FilePart(name="a.txt", data=TEXT)) == m.FilePart(name="a.txt", data=TEXT)
    # A declared binary type holding UTF-8 text is text; a byte-order mark is dropped.
    assert admit_part(m.FilePart(name="x", data=b"\xef\xbb\xbf{}", content_type="application/octet-stream")).data == b"{}"
    for data in (PDF, b"\xff\xfe\x00a", b"a\x00b"):
        error = refusal(m.FilePart(name="doc.pdf", data=data, content_type="application/pdf"))
        assert error.code == "invalid_request" and "'doc.pdf' (application/pdf) is not text the model can read" in error.message


def test_images_stay_images_even_attached_as_files() -> None:
    assert admit_part(m.FilePart(name="p.png", data=PNG, content_type="application/octet-stream")) == m.ImagePart(data=PNG, mime_type="image/png")
    assert admit_part(m.ImagePart(data=PNG, mime_type="IMAGE/PNG")) == m.ImagePart(data=PNG, mime_type="image/png")
    assert refusal(m.ImagePart(data=b"BM..", mime_type="image/bmp")).code == "invalid_request"
    assert refusal(m.ImagePart(data=b"", mime_type="image/png")).code == "invalid_request"


def test_sizes_and_counts_are_too_large() -> None:
    assert refusal(m.FilePart(name="big.txt", data=b"x" * (MAX_FILE_BYTES + 1))).code == "too_large"
    with pytest.raises(m.KernelError) as caught:
        admit_parts([m.FilePart(name=f"{i}.txt", data=b"x") for i in range(MAX_PARTS + 1)])
    assert caught.value.code == "too_large"


def test_message_from_parts_and_the_models_view_of_a_file() -> None:
    assert message_from_parts((m.TextPart("a"), m.TextPart("b"))) == m.Message(role="user", content="a\nb")
    image = (m.TextPart("look"), m.ImagePart(data=PNG))
    assert message_from_parts(image) == m.Message(role="user", parts=image)
    assert file_text(m.FilePart(name="a.txt", data=TEXT)) == "File: a.txt (text/plain)\n```\nhéllo, wörld\n\n```"
    # Stored before the policy: named, never decoded into mojibake.
    assert "not text" in file_text(m.FilePart(name="old.pdf", data=PDF, content_type="application/pdf"))


@pytest.mark.anyio
async def test_a_prompt_is_judged_before_a_session_is_made() -> None:
    provider = ScriptedProvider()
    async with running_kernel(provider) as kernel:
        with pytest.raises(m.KernelError) as caught:
            await kernel.execute(m.Prompt(session_id="s", parts=(m.TextPart("read"), m.FilePart(name="d.pdf", data=PDF, content_type="application/pdf"))))
        assert caught.value.code == "invalid_request"
        assert await kernel.find_session("s") is None and provider.requests == []
        sub = await kernel.subscribe((await kernel.execute(m.OpenSession(session_id="s"))).session.session_id)
        parts = (m.TextPart("see"), m.FilePart(name="p.png", data=PNG), m.FilePart(name="n.txt", data=TEXT))
        accepted = await kernel.execute(m.Prompt(session_id="s", parts=parts))
        await run_events(sub, accepted.run_id)
        sent = provider.requests[0].messages[-1]
        assert sent.parts == (m.TextPart("see"), m.ImagePart(data=PNG), m.TextPart("File: n.txt (text/plain)\n```\nhéllo, wörld\n\n```"))
        with pytest.raises(m.KernelError):
            await kernel.execute(m.SaveHistory(session_id="s", messages=(m.Message(role="user", parts=(m.FilePart(name="d.pdf", data=PDF),)),)))
