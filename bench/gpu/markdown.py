"""results.md: the environment, then per section its scalar fields and its rows as one table."""


def cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value).replace("|", "\\|")


def table(rows: list[dict]) -> list[str]:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return lines


def render(results: dict) -> str:
    env = results["environment"]
    lines = ["# physlm GPU proof" + (" (CPU smoke: toy sizes)" if results["smoke"] else ""), "",
             f"GPU {env['gpu']}, torch {env['torch']} (CUDA {env['cuda']}), Python "
             f"{env['python']}, {env['date']}", "", f"`{env['command']}`", ""]
    for name, section in results["sections"].items():
        lines += [f"## {name}: {section['status']}, {section.get('seconds', 0)} s", ""]
        lines += [f"- {key}: {cell(value)}" for key, value in section.items()
                  if key not in ("status", "seconds", "rows")]
        if section.get("rows"):
            lines += [""] + table(section["rows"])
        lines.append("")
    return "\n".join(lines)
