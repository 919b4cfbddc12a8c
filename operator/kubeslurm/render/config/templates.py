"""The jinja2 environment over templates/ (the repo folder, or its copy inside a wheel)."""

from functools import cache
from pathlib import Path

import jinja2

_PACKAGED = Path(__file__).resolve().parent.parent / "templates"
_REPOSITORY = Path(__file__).resolve().parents[3] / "templates"


def templates_dir() -> Path:
    for candidate in (_PACKAGED, _REPOSITORY):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"no templates folder at {_PACKAGED} or {_REPOSITORY}; reinstall kubeslurm")


@cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_template(name: str, **context) -> str:
    return environment().get_template(name).render(**context)
