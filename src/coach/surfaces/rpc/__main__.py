"""``python -m coach.surfaces.rpc`` (``make rpc-types``): print the schema ``web/src/rpc.ts``
is generated from."""

import json

from . import json_schema

print(json.dumps(json_schema(), indent=2, ensure_ascii=False))
