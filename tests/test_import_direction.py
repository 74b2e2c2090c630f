"""Data flows one way: corpus_gen never imports trainer or launch, trainer never imports launch."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {"corpus_gen": ("trainer", "launch"), "trainer": ("launch",)}


def imported_packages(source: str) -> set[str]:
    """The top-level packages a module's source imports, wherever the import statement is."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_nothing_downstream(package):
    offending = [f"{path.relative_to(ROOT)} imports {name}"
                 for path in sorted((ROOT / package).rglob("*.py"))
                 for name in sorted(imported_packages(path.read_text()) & set(FORBIDDEN[package]))]
    assert offending == []


def test_the_check_sees_every_form_of_import():
    source = "import trainer.x\nfrom launch import cli\ndef f():\n    from trainer.eval import y\n"
    assert imported_packages(source) == {"trainer", "launch"}
    assert imported_packages("from . import sibling\nimport os") == {"os"}
