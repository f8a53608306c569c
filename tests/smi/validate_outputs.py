#!/usr/bin/env python3
"""Validates the spyre-smi output the smi tests saved (smi_common.save_output) with
well-kept libraries (Debian's, in the sysroot): every --json document against
Documentation/spyre-smi.schema.json with jsonschema (Draft 2020-12), every exporter scrape with
prometheus_client's text-format parser. First checks that both libraries reject a broken
document and a broken scrape (so that a validator that accepts everything fails here).
Prints "PASS name" / "FAIL name: why" per file and "N passed, M failed" last.
Usage: validate_outputs.py DIR...   (each DIR must hold at least one .json and one .prom file)
"""
import copy
import json
import os
import sys

import jsonschema
from prometheus_client.parser import text_string_to_metric_families

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = json.load(open(os.path.join(HERE, "../../Documentation/spyre-smi.schema.json")))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
passed = failed = 0


def check(name, ok, why=""):
    global passed, failed
    passed, failed = passed + ok, failed + (not ok)
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}")


def json_problems(doc):
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in VALIDATOR.iter_errors(doc)]


def scrape_problem(text):
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if family.type == "counter" and s.value < 0:
                    return f"counter {s.name} is negative"
        return None
    except Exception as e:  # noqa: BLE001 - the parser raises ValueError and others
        return f"{type(e).__name__}: {e}"


def self_check(sample_doc):
    bad = copy.deepcopy(sample_doc)
    bad["devices"][0]["health"] = "fine"
    del bad["schema_version"]
    check("jsonschema_rejects_a_broken_document", len(json_problems(bad)) >= 2,
          json_problems(bad))
    check("prometheus_client_rejects_a_broken_scrape",
          scrape_problem('spyre_up{card=0} 1\n') is not None)


def main(dirs):
    first_doc = None
    for d in dirs:
        files = sorted(os.listdir(d)) if os.path.isdir(d) else []
        kinds = {os.path.splitext(f)[1] for f in files}
        check(f"{d} holds --json and exporter output", {".json", ".prom"} <= kinds,
              f"found {files}")
        for f in files:
            path = os.path.join(d, f)
            text = open(path).read()
            if f.endswith(".json"):
                doc = json.loads(text)
                first_doc = first_doc or (doc if doc.get("devices") else None)
                problems = json_problems(doc)
                check(f"{path} valid against the schema", not problems, "; ".join(problems[:5]))
            elif f.endswith(".prom"):
                problem = scrape_problem(text)
                check(f"{path} parsed by prometheus_client", problem is None, problem)
    if first_doc is None:
        check("a --json document with a device to mutate", False, "none saved")
    else:
        self_check(first_doc)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
