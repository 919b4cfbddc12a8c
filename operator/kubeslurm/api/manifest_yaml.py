"""YAML as kubeslurm reads manifests: safe, without silently dropped keys or alias bombs.

PyYAML's safe loader keeps the last of two equal keys without a word, while kubectl
refuses them; `render` must not show a config that the cluster would never get. Anchors
and aliases stay allowed (they are ordinary YAML), but a document whose aliases add
more than MAX_EXPANDED_NODES nodes once expanded (a "billion laughs") is refused before
anything walks it.
"""

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_EXPANDED_NODES = 100_000  # that aliases may add
_MERGE_TAG = "tag:yaml.org,2002:merge"


_IN_PROGRESS = -1


def _expanded_size(node: Node, sizes: dict[int, int]) -> int:
    """Nodes in the document once every alias is replaced by what it names (memoised: aliases share nodes).

    Raises ConstructorError for an alias inside its own anchor: it would be an endless value."""
    known = sizes.get(id(node))
    if known == _IN_PROGRESS:
        raise ConstructorError(None, None, "an alias refers to a node that contains it (an endless value)", node.start_mark)
    if known is not None:
        return known
    sizes[id(node)] = _IN_PROGRESS
    if isinstance(node, SequenceNode):
        size = 1 + sum(_expanded_size(child, sizes) for child in node.value)
    elif isinstance(node, MappingNode):
        size = 1 + sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    else:
        size = 1
    sizes[id(node)] = size
    return size


# libyaml's parser when PyYAML has it (several times faster); the checks below are the same.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ManifestLoader(_SafeLoader):
    """The safe loader, refusing duplicate keys and alias bombs, naming the line."""

    def construct_document(self, node):
        sizes: dict[int, int] = {}
        # Only what aliases add counts: a long plain document is not a bomb (len(sizes): its distinct nodes).
        if _expanded_size(node, sizes) - len(sizes) > MAX_EXPANDED_NODES:
            raise ConstructorError(
                None, None,
                f"the document's aliases expand it by more than {MAX_EXPANDED_NODES} nodes; write it out plainly",
                node.start_mark,
            )
        return super().construct_document(node)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue  # `<<: *base` merges; keys written beside it override, as YAML says
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # an unhashable key: the base constructor names it
                if first is not None:
                    raise ConstructorError(
                        "while reading a mapping", node.start_mark,
                        f"duplicate key {key!r} (first at line {first.line + 1}): kubectl refuses it, and which one wins is unclear",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def load_all(text: str) -> list:
    """Every document of a YAML stream; yaml.YAMLError when it is not valid or not safe to read."""
    return list(yaml.load_all(text, Loader=ManifestLoader))
