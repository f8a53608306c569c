#!/usr/bin/env python3
"""A checker of the Prometheus text exposition format (version 0.0.4).

No Prometheus client package is installed in the guest or build tree, so this parses the
format as documented (prometheus.io "Exposition formats"): "# HELP name text" and
"# TYPE name counter|gauge|histogram|summary|untyped" lines, at most one of each per metric
family and before its samples; samples "name{label="value",...} value [timestamp]" with
metric and label names matching [a-zA-Z_:][a-zA-Z0-9_:]* / [a-zA-Z_][a-zA-Z0-9_]*, label
values with only \\\\, \\" and \\n escapes, no label repeated, values that parse as Go floats
(including NaN, +Inf, -Inf), all samples of a family together, no duplicate series, and the
text ending in a newline. Counters must not be negative.
Usage: prometheus_check.py [FILE]  (stdin without it). parse() returns the samples.
"""
import re
import sys

METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
SUFFIXES = ("_bucket", "_count", "_sum")


class FormatError(Exception):
    pass


def parse_value(text, where):
    if text in ("NaN", "+Inf", "-Inf", "Inf"):
        return float(text.replace("Inf", "inf"))
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
        raise FormatError(f"{where}: value {text!r} is not a float")
    return float(text)


def parse_labels(text, pos, where):
    """Parses {a="x",b="y"} starting at text[pos] == '{'; returns (labels, next pos)."""
    labels = {}
    pos += 1
    while True:
        if pos < len(text) and text[pos] == "}":
            return labels, pos + 1
        m = LABEL.match(text, pos)
        if not m:
            raise FormatError(f"{where}: bad label name at column {pos}")
        name = m.group(0)
        pos = m.end()
        if text[pos:pos + 2] != '="':
            raise FormatError(f"{where}: expected =\" after label {name}")
        pos += 2
        value = []
        while True:
            if pos >= len(text):
                raise FormatError(f"{where}: unterminated value of label {name}")
            ch = text[pos]
            if ch == "\\":
                esc = text[pos + 1:pos + 2]
                if esc not in ("\\", '"', "n"):
                    raise FormatError(f"{where}: bad escape \\{esc} in label {name}")
                value.append("\n" if esc == "n" else esc)
                pos += 2
            elif ch == '"':
                pos += 1
                break
            else:
                value.append(ch)
                pos += 1
        if name in labels:
            raise FormatError(f"{where}: label {name} repeated")
        labels[name] = "".join(value)
        if pos < len(text) and text[pos] == ",":
            pos += 1
        elif pos >= len(text) or text[pos] != "}":
            raise FormatError(f"{where}: expected , or }} after label {name}")


def family_of(name, types):
    if name in types:
        return name
    for s in SUFFIXES:
        if name.endswith(s) and name[:-len(s)] in types:
            return name[:-len(s)]
    return name


def parse(text):
    """Returns {family: {"type": t, "help": h, "samples": [(name, labels, value)]}}."""
    if text and not text.endswith("\n"):
        raise FormatError("the text does not end with a newline")
    fams, types, order, seen = {}, {}, [], set()
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = f"line {n}"
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 2 and parts[1] in ("HELP", "TYPE"):
                if len(parts) < 3 or not METRIC.fullmatch(parts[2]):
                    raise FormatError(f"{where}: {parts[1]} without a valid metric name")
                name = parts[2]
                fam = fams.setdefault(name, {"type": None, "help": None, "samples": []})
                if fam["samples"]:
                    raise FormatError(f"{where}: {parts[1]} of {name} after its samples")
                if parts[1] == "TYPE":
                    if fam["type"] is not None:
                        raise FormatError(f"{where}: second TYPE line for {name}")
                    if len(parts) < 4 or parts[3].strip() not in TYPES:
                        raise FormatError(f"{where}: bad type for {name}")
                    fam["type"] = types[name] = parts[3].strip()
                else:
                    if fam["help"] is not None:
                        raise FormatError(f"{where}: second HELP line for {name}")
                    fam["help"] = parts[3] if len(parts) > 3 else ""
                    if re.search(r"\\[^\\n]", fam["help"]):
                        raise FormatError(f"{where}: bad escape in HELP of {name}")
            continue
        m = METRIC.match(line)
        if not m:
            raise FormatError(f"{where}: bad metric name")
        name, pos, labels = m.group(0), m.end(), {}
        if pos < len(line) and line[pos] == "{":
            labels, pos = parse_labels(line, pos, where)
        rest = line[pos:].split()
        if not line[pos:pos + 1].isspace() or not 1 <= len(rest) <= 2:
            raise FormatError(f"{where}: expected ' value [timestamp]' after the series")
        value = parse_value(rest[0], where)
        if len(rest) == 2 and not re.fullmatch(r"-?\d+", rest[1]):
            raise FormatError(f"{where}: bad timestamp {rest[1]!r}")
        fname = family_of(name, types)
        fam = fams.setdefault(fname, {"type": None, "help": None, "samples": []})
        if order and order[-1] != fname and fname in order:
            raise FormatError(f"{where}: samples of {fname} are not together")
        if not order or order[-1] != fname:
            order.append(fname)
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            raise FormatError(f"{where}: duplicate series {name}{labels}")
        seen.add(key)
        if fam["type"] == "counter" and value < 0:
            raise FormatError(f"{where}: counter {name} is negative")
        fam["samples"].append((name, labels, value))
    return fams


def self_test():
    good = ('# HELP a_total Things.\n# TYPE a_total counter\na_total{x="q\\"\\\\\\n"} 1.5e3\n'
            "b 2\n")
    fams = parse(good)
    assert fams["a_total"]["samples"][0][1]["x"] == 'q"\\\n'
    bad = ["a 1",  # no final newline
           "# TYPE a counter\n# TYPE a counter\na 1\n", "a 1\n# TYPE a gauge\n",
           "# TYPE a bogus\n", 'a{x="1",x="2"} 1\n', 'a{x="\\t"} 1\n', "a one\n",
           "a 1\nb 1\na 2\n", "a 1\na 1\n", "# TYPE a counter\na -1\n", '1a 1\n',
           'a{x="1"\n', "a 1 1.5\n", 'a{x=1} 1\n']
    for text in bad:
        try:
            parse(text)
        except FormatError:
            continue
        raise AssertionError(f"accepted invalid exposition {text!r}")


if __name__ == "__main__":
    self_test()
    data = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
    try:
        fams = parse(data)
    except FormatError as e:
        print(f"invalid exposition: {e}")
        sys.exit(1)
    print(f"{len(fams)} families, {sum(len(f['samples']) for f in fams.values())} samples")
