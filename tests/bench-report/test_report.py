"""tools/bench/report.py on the fixture JSON files beside this test (tiny versions of what
'make bench' writes): the HTML has each plot with one marker per case and the numbers of the
inputs in its tables; a missing or broken input leaves its section out with a line saying why.
Runs on the host's python3 with python3-matplotlib (tests/check.sh installs it):

    /usr/bin/python3 -m unittest discover -s tests/bench-report -v
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(HERE, "fixtures")
REPORT = os.path.join(TOP, "tools", "bench", "report.py")
INPUTS = ["model.json", "torch_compare.json", "torch_compile.json"]


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bench-report-")
        self.addCleanup(shutil.rmtree, self.dir)

    def copy(self, *names):
        for n in names:
            shutil.copy(os.path.join(FIXTURES, n), self.dir)

    def run_report(self):
        """The HTML report.py writes for self.dir; it must exit 0 whatever the inputs."""
        out = os.path.join(self.dir, "report.html")
        p = subprocess.run([sys.executable, REPORT, "--bench-dir", self.dir, "--out", out],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"wrote {out}", p.stdout)
        with open(out) as f:
            return f.read()

    def section(self, page, title):
        """The HTML of one section: from its <h2> to the next one."""
        start = page.index(f"<h2>{title}</h2>")
        end = page.find("<h2>", start + 1)
        return page[start:end if end >= 0 else len(page)]

    def test_header(self):
        page = self.run_report()
        git = subprocess.run(["git", "-C", TOP, "rev-parse", "HEAD"], capture_output=True,
                             text=True)
        if git.returncode == 0:  # a checkout: its commit
            self.assertRegex(git.stdout.strip(), "^[0-9a-f]{40}$")
            self.assertIn(f"Commit: {git.stdout.strip()}", page)
        else:  # an unpacked tarball: said so
            self.assertIn("Commit: unknown (git cannot read the checkout)", page)
        self.assertRegex(page, r"Date: \d{4}-\d\d-\d\d \d\d:\d\d UTC")
        self.assertIn(f"Machine: {os.uname().nodename}", page)

    def test_roofline(self):
        self.copy("model.json")
        sec = self.section(self.run_report(), "Op library on the roofline")
        self.assertEqual(sec.count("<svg"), 1)
        with open(os.path.join(FIXTURES, "model.json")) as f:
            model = json.load(f)
        cases = [c for c in model if "flops" in c]
        # one plan and one naive marker per case, the roofs named with their values
        self.assertEqual(len(re.findall(r'<g id="plan-\d+"', sec)), len(cases))
        self.assertEqual(len(re.findall(r'<g id="naive-\d+"', sec)), len(cases))
        for roof in ["DDR 204.8 GB/s", "matrix fp16/bf16 98.3 TFLOP/s", "matrix int8 197 TFLOP/s",
                     "matrix fp32 24.6 TFLOP/s", "vector (16-bit) 6.14 Tops/s"]:
            self.assertIn(roof, sec)
        # 2 x 512 x 4096 x 4096 FLOP in 250 us: 68.7 TFLOP/s, the naive plan 34.4, 2x apart;
        # at 409.6 FLOP/byte DDR allows 83.9 TFLOP/s: 81.9% of the roof
        row = re.search(r"<tr><td>1</td><td>matmul q/o_proj 512x4096x4096 fp16</td>(.*?)</tr>",
                        sec).group(1)
        self.assertEqual(re.findall(r"<td>([^<]*)</td>", row),
                         ["410", "250", "68.7", "500", "34.4", "2", "81.9"])
        # softmax is held to the DDR roof under the vector rate: 1.25 FLOP/byte x 204.8 GB/s
        row = re.search(r"<td>3</td><td>softmax dim 1 of \[16, 1024, 128\] fp16</td>(.*?)</tr>",
                        sec).group(1)
        self.assertEqual(re.findall(r"<td>([^<]*)</td>", row)[-1], "81.9")
        self.assertIn("Not on the chart", sec)
        self.assertIn("attention plan reuse Lq 1 Lk 513..4096", sec)

    def test_speed(self):
        self.copy("torch_compare.json")
        sec = self.section(self.run_report(), "Functional speed against libtorch")
        self.assertEqual(sec.count("<svg"), 1)
        # green bars (tab:green) where the ratio is within the target, red (tab:red) where not
        for bar, fill in [("ratio-256-fp16", "#2ca02c"), ("ratio-512-fp32", "#d62728")]:
            group = re.search(f'<g id="{bar}">(.*?)</g>', sec, re.S).group(1)
            self.assertIn(f"fill: {fill}", group)
        self.assertIn('<g id="ratio-256-int8"', sec)
        self.assertIn('<g id="target"', sec)
        self.assertIn("target 1.5x", sec)
        self.assertIn("<td>256</td><td>fp16</td><td>1.23</td><td>1</td><td>1.23</td><td>met</td>"
                      "<td>1.3</td>", sec)
        self.assertIn("<td>512</td><td>fp32</td><td>5</td><td>2</td><td>2.5</td><td>MISSED</td>"
                      "<td>2.6</td>", sec)
        self.assertIn("<td>256</td><td>int8</td><td>-</td><td>-</td><td>-</td><td>MISSED</td>",
                      sec)
        self.assertIn("1 of 3 met", sec)

    def test_compile(self):
        self.copy("torch_compile.json")
        sec = self.section(self.run_report(), "torch.compile against eager")
        self.assertEqual(sec.count("<svg"), 1)
        for series in ["modeled_us-eager", "modeled_us-compiled", "modeled_us-compiled+replay",
                       "host_us-eager", "host_us-compiled", "host_us-compiled+replay"]:
            self.assertIn(f'<g id="{series}"', sec)
        self.assertIn("<td>TinyGranite decode step</td><td>compiled+replay</td><td>40</td>"
                      "<td>1</td><td>455</td><td>120</td>", sec)
        self.assertIn("<td>chain (1024, 1024) float16</td><td>eager</td><td>5</td><td>-</td>"
                      "<td>61.2</td><td>180</td>", sec)

    def test_missing_inputs_are_named(self):
        page = self.run_report()
        self.assertNotIn("<svg", page)
        for name in INPUTS:
            self.assertRegex(page, f"Left out: {re.escape(os.path.join(self.dir, name))} not "
                                   "found")

    def test_broken_inputs_are_named(self):
        self.copy("torch_compare.json")
        with open(os.path.join(self.dir, "model.json"), "w") as f:
            f.write('[{"name": "matmul"')
        with open(os.path.join(self.dir, "torch_compile.json"), "w") as f:
            json.dump({"records": [{"case": "x"}]}, f)
        page = self.run_report()
        self.assertIn("model.json is not valid JSON (line 1", page)
        self.assertIn("torch_compile.json does not have the expected fields (KeyError", page)
        self.assertEqual(page.count("<svg"), 1)  # the one good input still drawn

    def test_model_json_without_roofline_fields(self):
        # model.json as spyre-ops-bench wrote it before it had FLOPs and the machine record
        with open(os.path.join(self.dir, "model.json"), "w") as f:
            json.dump([{"name": "matmul q/o_proj 1x4096x4096 fp16", "modeled_us": 200.0}], f)
        page = self.run_report()
        self.assertIn("has no &#x27;machine&#x27; record", page)


if __name__ == "__main__":
    unittest.main()
