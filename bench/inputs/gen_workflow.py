#!/usr/bin/env python3
"""Writes large inputs for the input-fence measurements in bench/README.md.

gen_workflow.py workflow MB OUT   a valid workflow of set nodes in a chain, about MB megabytes
gen_workflow.py input MB OUT      an --input object {"docs": [...]} of about MB megabytes
"""
import json
import sys

kind, mb, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
target = int(mb * 1_000_000)
pad = "lorem ipsum dolor sit amet " * 5
with open(out, "w") as f:
    if kind == "input":
        f.write('{"docs": [')
        n = 0
        while f.tell() < target:
            f.write(("," if n else "") + json.dumps(f"doc {n}: " + pad * 8))
            n += 1
        f.write("]}\n")
        sys.exit(0)
    f.write('{"name": "big", "state": {"c": {}}, "nodes": {\n')
    per = 242
    count = max(1, target // per)
    for i in range(count):
        f.write(("," if i else "") + f'"n{i}": {{"kind": "set", "description": "{pad}", '
                f'"values": {{"c": {i}}}}}\n')
    f.write('}, "edges": [\n{"from": "START", "to": "n0"}')
    for i in range(1, count):
        f.write(f',\n{{"from": "n{i-1}", "to": "n{i}"}}')
    f.write(f',\n{{"from": "n{count-1}", "to": "END"}}]}}\n')
