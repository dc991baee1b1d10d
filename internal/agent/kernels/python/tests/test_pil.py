"""PIL Image.show() and Image.save(path) display the image (docs/wire/code-interpreter.md)."""

import base64


def png_bytes(bundle):
    """IPython's formatter gives bytes; ipykernel base64-encodes them on the wire."""
    data = bundle["image/png"]
    return data if isinstance(data, bytes) else base64.b64decode(data)


def test_show_displays_png(run):
    bundle = run.one("from PIL import Image\nimg = Image.new('RGB', (8, 4), 'red')\nimg.show()")
    assert png_bytes(bundle).startswith(b"\x89PNG\r\n\x1a\n")
    assert "PIL.Image.Image image mode=RGB size=8x4" in bundle["text/plain"]


def test_save_to_path_displays_png(run, tmp_path):
    target = tmp_path / "x.png"
    bundle = run.one(f"img.save({str(target)!r})")
    assert target.read_bytes().startswith(b"\x89PNG")
    assert png_bytes(bundle).startswith(b"\x89PNG")


def test_save_to_buffer_does_not_display(run):
    assert run.run("import io\nbuf = io.BytesIO()\nimg.save(buf, format='PNG')") == []
    assert run.shell.user_ns["buf"].getvalue().startswith(b"\x89PNG")
