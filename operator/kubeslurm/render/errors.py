"""The error a renderer raises when objects are valid alone but not together."""


class RenderError(ValueError):
    """`field` is the path in the object that must change; the message says how."""

    def __init__(self, obj: str, field: str, message: str):
        self.obj = obj
        self.field = field
        self.message = message
        super().__init__(f"{obj}: {field}: {message}")
