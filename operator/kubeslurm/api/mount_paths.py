"""Mount paths that would hide what the operator mounts or what the image holds.

One check, two forms: `mount_path_problem` for the models (a sentence naming the path
in the way) and `mount_path_rule` for the CRD (the same test as a CEL rule, so
`kubectl apply` refuses it before the operator sees it). A path is refused at, under
or above a reserved one: under it would shadow part of it, above it would hide it all.
"""


def mount_path_problem(path: str, reserved_paths: tuple[str, ...], whose: str) -> str | None:
    """Why `path` would hide one of `reserved_paths` (`whose`: what they are, for the message), or None."""
    for reserved in reserved_paths:
        if path == reserved or path.startswith(reserved + "/"):
            return f"{path} is {'' if path == reserved else 'under '}{reserved}, which {whose}"
        if reserved.startswith(path + "/") or path == "/":
            return f"{path} would hide {reserved}, which {whose}"
    return None


def mount_path_rule(reserved_paths: tuple[str, ...]) -> str:
    """The CEL form of mount_path_problem(...) is None, for a string field."""
    ancestors = sorted({"/".join(p.split("/")[:i]) or "/" for p in reserved_paths for i in range(1, p.count("/") + 1)})
    return (
        f"!(self in {list(reserved_paths + tuple(ancestors))})"
        f" && !{list(reserved_paths)}.exists(p, self.startsWith(p + '/'))"
    )


def paths_overlap(a: str, b: str) -> bool:
    """One path is the other or lies under it: mounting both would shadow one."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")
