#!/usr/bin/env python3
"""spyre-smi's command line on two simulated cards (SPYRE_BACKEND=sim): --json (documents
saved for the schema check of tests/smi/validate_outputs.py), --csv field selection, loops,
dmon, topo, reset refusal, the exporter (scrapes saved for the exposition-format check), and
the no-card message. Usage: smi_cli_test.py SPYRE_SMI  (SMI_OUTPUT_DIR: where to save)
"""
import json
import os
import sys

from smi_common import Checks, clear_outputs, http_get, run, sample, save_output, start_exporter

smi = sys.argv[1]
env = dict(os.environ, SPYRE_BACKEND="sim", SPYRE_SIM_DEVICES="2")
t = Checks()
clear_outputs()

rc, out, err = run(smi, "--json", "--window", "50", env=env)
doc = json.loads(out) if rc == 0 else {}
t.check("json_exit_status", rc == 0, err)
save_output("two_cards.json", out)
devs = doc.get("devices", [])
t.check("json_two_sim_cards", [d.get("backend") for d in devs] == ["sim", "sim"], out[:300])
t.check("json_schema_version", doc.get("schema_version") == "1.1", doc.get("schema_version"))
t.check("json_utilization_and_cores",
        all(d["utilization"] and len(d["utilization"]["core_percent"]) == 32 for d in devs),
        json.dumps([d.get("utilization") for d in devs])[:300])

rc, out, err = run(smi, "--csv", "--query", "index,name,memory.total,health,serial", env=env)
lines = out.splitlines()
t.check("csv_header_with_units",
        lines[:1] == ["index, name, memory.total [MiB], health, serial"], out)
t.check("csv_selected_fields",
        lines[1:] == ["0, spyre-sim0, 1024, ok, N/A", "1, spyre-sim1, 1024, ok, N/A"], out)
rc, out, err = run(smi, "--query", "memory.used", "--noheader", "-i", "1", env=env)
t.check("csv_noheader_one_card", rc == 0 and out == "0\n", f"rc {rc} {out!r} {err}")
rc, out, err = run(smi, "--csv", "--query", "index,nope", env=env)
t.check("csv_unknown_field_refused",
        rc == 1 and 'unknown field "nope"' in err and "memory.used" in err, f"rc {rc} {err}")
rc, out, err = run(smi, "--csv", "--json", env=env)
t.check("one_view_at_a_time", rc == 1 and "choose one of" in err, f"rc {rc} {err}")

rc, out, err = run(smi, "--csv", "-l", "0.1", "-c", "3", env=env)
t.check("loop_repeats_csv_rows", rc == 0 and len(out.splitlines()) == 1 + 3 * 2, out)
rc, out, err = run(smi, "-l", "0.1", "-c", "2", "--json", env=env)
docs = [json.loads(line) for line in out.splitlines()] if rc == 0 else []
t.check("loop_json_lines",
        len(docs) == 2 and all(d.get("devices") for d in docs), out[:200])
for i, line in enumerate(out.splitlines()):
    save_output(f"loop{i}.json", line)

rc, out, err = run(smi, "dmon", "-d", "0.1", "-c", "2", env=env)
lines = out.splitlines()
t.check("dmon_lines", rc == 0 and len(lines) == 2 + 2 * 2 and lines[0].startswith("# idx")
        and lines[2].split()[:2] == ["0", "ok"], out)
rc, out, err = run(smi, "dmon", "-i", "1", "-d", "0.1", "-c", "1", env=env)
t.check("dmon_card_filter", rc == 0 and [l.split()[0] for l in out.splitlines()[2:]] == ["1"], out)

rc, out, err = run(smi, "topo", "-m", env=env)
t.check("topo_matrix", rc == 0 and "| spyre0 | X       | P2P N/A |" in out
        and "| spyre1 | P2P N/A | X       |" in out and "HOST N/A |" not in out, out)
rc, out, err = run(smi, "topo", env={**env, "SPYRE_SIM_P2P": "0"})
t.check("topo_matrix_without_p2p", rc == 0 and "| spyre0 | X        | HOST N/A |" in out, out)

rc, out, err = run(smi, env=env)
t.check("table_with_processes", rc == 0 and "Processes:" in out and "Health" in out, out)
rc, out, err = run(smi, "-q", env=env)
t.check("details", rc == 0 and "Cores 24-31 (%)" in out and "Errors and resets" in out, out[:400])

rc, out, err = run(smi, "reset", "-i", "0", env=env)
t.check("reset_refused_on_simulator", rc == 1 and "cannot be reset" in err, f"rc {rc} {err}")
rc, out, err = run(smi, "reset", env=env)
t.check("reset_needs_a_card_among_several", rc == 1 and "-i N" in err, f"rc {rc} {err}")

try:
    p, port = start_exporter(smi, 3, env=env)
    s1, ctype, body1 = http_get(port, "/metrics")
    s2, _, body2 = http_get(port, "/metrics")
    s3, _, _ = http_get(port, "/nothing")
    p.wait(timeout=60)
    t.check("exporter_status_and_type", s1 == 200 and s2 == 200 and ctype.startswith(
        "text/plain; version=0.0.4"), f"{s1} {s2} {ctype}")
    save_output("scrape1.prom", body1)
    save_output("scrape2.prom", body2)
    t.check("exporter_metrics",
            sample(body1, "spyre_memory_total_bytes", card="1") == 1024 * 2**20
            and sample(body1, "spyre_up", card="0") == 1
            and sample(body1, "spyre_health_state", card="0", state="ok") == 1
            and sample(body1, "spyre_core_busy_seconds_total", card="0", core="31") is not None,
            body1[:600])
    t.check("exporter_404_and_bounded_exit", s3 == 404 and p.returncode == 0,
            f"{s3} rc {p.returncode}")
except Exception as e:  # noqa: BLE001 - any failure of the exporter is a failed check
    t.check("exporter", False, repr(e))

rc, out, err = run(smi, env=dict(env, SPYRE_SIM_DEVICES="0"))
t.check("no_card_message", rc == 2 and "No Spyre card found" in err, f"rc {rc} {err}")
sys.exit(t.done())
