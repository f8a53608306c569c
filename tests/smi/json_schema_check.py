#!/usr/bin/env python3
"""A JSON Schema (2020-12) validator for the subset Documentation/spyre-smi.schema.json uses.

No JSON Schema package is installed in the guest or build tree, so this checks the keywords
type, enum, required, properties, additionalProperties, items, minimum, maximum, pattern,
$ref (local "#/$defs/NAME") and $defs. Any other keyword in the schema is an error: the
schema cannot use a rule this checker would silently skip.
Usage as a program: json_schema_check.py SCHEMA [DOCUMENT]  (document from stdin without it).
"""
import json
import re
import sys

ANNOTATIONS = {"$schema", "$id", "title", "description", "$defs"}
CHECKED = {"type", "enum", "required", "properties", "additionalProperties", "items",
           "minimum", "maximum", "pattern", "$ref"}

TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def validate(doc, schema, root=None, path="$"):
    """Returns a list of "path: problem" strings (empty if doc is valid)."""
    root = schema if root is None else root
    errors = []
    unknown = set(schema) - ANNOTATIONS - CHECKED
    if unknown:
        return [f"{path}: schema uses unsupported keywords {sorted(unknown)}"]
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            return [f"{path}: unsupported $ref {ref}"]
        errors += validate(doc, root["$defs"][ref[len("#/$defs/"):]], root, path)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(TYPES[t](doc) for t in types):
            return errors + [f"{path}: {json.dumps(doc)[:60]} is not of type {types}"]
    if "enum" in schema and doc not in schema["enum"]:
        errors.append(f"{path}: {doc!r} is not one of {schema['enum']}")
    if isinstance(doc, dict):
        for key in schema.get("required", []):
            if key not in doc:
                errors.append(f"{path}: missing required property {key!r}")
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, value in doc.items():
            if key in props:
                errors += validate(value, props[key], root, f"{path}.{key}")
            elif extra is False:
                errors.append(f"{path}: property {key!r} is not in the schema")
            elif isinstance(extra, dict):
                errors += validate(value, extra, root, f"{path}.{key}")
    if isinstance(doc, list) and "items" in schema:
        for i, value in enumerate(doc):
            errors += validate(value, schema["items"], root, f"{path}[{i}]")
    if TYPES["number"](doc):
        if "minimum" in schema and doc < schema["minimum"]:
            errors.append(f"{path}: {doc} < minimum {schema['minimum']}")
        if "maximum" in schema and doc > schema["maximum"]:
            errors.append(f"{path}: {doc} > maximum {schema['maximum']}")
    if isinstance(doc, str) and "pattern" in schema and not re.search(schema["pattern"], doc):
        errors.append(f"{path}: {doc!r} does not match {schema['pattern']}")
    return errors


def self_test():
    """The checker must reject what it claims to check."""
    s = {"type": "object", "required": ["a"], "additionalProperties": False,
         "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"enum": ["x", None]},
                        "c": {"type": "array", "items": {"type": "string", "pattern": "^v"}}},
         "$defs": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}}
    bad = [{}, {"a": -1}, {"a": 10}, {"a": 1.5}, {"a": True}, {"a": 1, "b": "y"},
           {"a": 1, "z": 0}, {"a": 1, "c": ["w"]}, {"a": 1, "c": [1]}, []]
    for doc in bad:
        assert validate(doc, s), f"accepted invalid {doc}"
    assert not validate({"a": 3, "b": None, "c": ["v1"]}, s)
    assert validate(1, {"exclusiveMinimum": 0}), "unknown keyword not reported"


if __name__ == "__main__":
    self_test()
    schema = json.load(open(sys.argv[1]))
    doc = json.load(open(sys.argv[2]) if len(sys.argv) > 2 else sys.stdin)
    problems = validate(doc, schema)
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)
