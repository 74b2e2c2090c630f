"""What the README quotes from the tree is the tree."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_quickstart_config_shown_is_the_shipped_file():
    readme = (ROOT / "README.md").read_text()
    shipped = (ROOT / "configs/experiment/quickstart.yaml").read_text()
    assert f"```yaml\n{shipped}```\n\n(`configs/experiment/quickstart.yaml`, as shipped.)" in readme
