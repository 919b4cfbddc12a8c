"""Reading user manifests into validated models, with errors that name the field."""

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import yaml
from pydantic import ValidationError

from .manifest_yaml import load_all
from .names import PATTERN_HELP

from .base import SubfieldError
from .pod_template import refused_field_message
from .resources import KINDS, NodeSet, SlurmCluster


class ManifestError(ValueError):
    """A manifest was refused. The message names the object, the field path and what is allowed."""


@dataclass
class Manifests:
    clusters: list[SlurmCluster] = field(default_factory=list)
    node_sets: list[NodeSet] = field(default_factory=list)

    def node_sets_of(self, cluster: SlurmCluster) -> list[NodeSet]:
        return [
            ns
            for ns in self.node_sets
            if ns.spec.cluster_name == cluster.metadata.name and ns.metadata.namespace == cluster.metadata.namespace
        ]


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_./-]+")


def _field_path(loc: tuple) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("function-after", "function-before") or "[" in str(part):
            # pydantic names union branches like 'int' or 'function-after[...]': not a field
            continue
        elif not _PLAIN_KEY.fullmatch(str(part)):
            # a map key as the user wrote it, quoted: it may hold a newline or spaces
            path += f"[{str(part)!r}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "(the object)"


def _path_and_message(item: dict) -> tuple[str, str]:
    """(field path, message) of one pydantic error, in the words the user needs."""
    loc = tuple(p for p in item["loc"] if p not in ("int", "str"))
    path = _field_path(loc)
    if item["type"] == "extra_forbidden":
        if "podTemplate" in loc:
            return path, refused_field_message(str(loc[-1]))
        return path, "unknown field (check the spelling; `kubeslurm crds` shows every field)"
    ctx = item.get("ctx") or {}
    if item["type"] == "string_pattern_mismatch" and ctx.get("pattern") in PATTERN_HELP:
        return path, f"{item['input']!r} is not allowed: {PATTERN_HELP[ctx['pattern']]}"
    cause = ctx.get("error")
    if isinstance(cause, SubfieldError):
        joined = cause.path if path == "(the object)" else f"{path}.{cause.path}"
        return joined.replace(".[", "["), cause.message
    return path, item["msg"].removeprefix("Value error, ")


def format_validation_error(what: str, error: ValidationError) -> str:
    lines = [f"{what} is invalid:"]
    seen = set()
    for item in error.errors():
        path, message = _path_and_message(item)
        line = f"  {path}: {message}"
        if line not in seen:
            seen.add(line)
            lines.append(line)
    return "\n".join(lines)


def parse_object(document: dict, source: str = "<input>"):
    """One decoded YAML document -> SlurmCluster or NodeSet."""
    if not isinstance(document, dict):
        raise ManifestError(f"{source}: expected a YAML mapping with apiVersion and kind, got {type(document).__name__}")
    kind = document.get("kind")
    model = KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ManifestError(f"{source}: kind {kind!r} is not one of {sorted(KINDS)}")
    metadata = document.get("metadata")
    name = metadata.get("name", "<no name>") if isinstance(metadata, dict) else "<no name>"
    try:
        return model.model_validate(document)
    except ValidationError as error:
        raise ManifestError(format_validation_error(f"{source}: {kind} {name!r}", error)) from None


def load_documents(documents: Iterable[dict], source: str = "<input>") -> Manifests:
    result = Manifests()
    for document in documents:
        if document is None:
            continue
        obj = parse_object(document, source)
        (result.clusters if isinstance(obj, SlurmCluster) else result.node_sets).append(obj)
    return result


def load_files(paths: Iterable[str | Path]) -> Manifests:
    result = Manifests()
    for path in paths:
        try:
            text = Path(path).read_text() if str(path) != "-" else __import__("sys").stdin.read()
        except UnicodeDecodeError as error:
            raise ManifestError(f"{path}: not UTF-8 text: {error}") from None
        try:
            documents = load_all(text)
        except yaml.YAMLError as error:
            raise ManifestError(f"{path}: not valid YAML: {error}") from None
        loaded = load_documents(documents, str(path))
        result.clusters += loaded.clusters
        result.node_sets += loaded.node_sets
    return result
