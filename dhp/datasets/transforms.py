"""How a data root's re-serialised copy is made from its upstream file (``transform`` in the data registry)."""

from __future__ import annotations

import io
import json
import pickle


class _SafeUnpickler(pickle.Unpickler):
    """Unpickle plain containers only: a downloaded pickle must not run code."""

    _ALLOWED = {("collections", "OrderedDict"), ("numpy", "dtype"),
                ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar")}

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a downloaded pickle")


def _plain(obj):
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        return obj.item()  # numpy scalar
    return obj


def _bartscore_pickle_to_json(blob: bytes) -> bytes:
    # the data root's copy is json.dumps(indent=0, ensure_ascii=False) of the pickle's contents with each
    # document's "sys_summs" last (the pickle has it before "ref_summ"); checked against the upstream pickle
    data = _plain(_SafeUnpickler(io.BytesIO(blob)).load())
    if isinstance(data, dict):
        data = {k: ({a: b for a, b in v.items() if a != "sys_summs"} | {"sys_summs": v["sys_summs"]})
                if isinstance(v, dict) and "sys_summs" in v else v for k, v in data.items()}
    return json.dumps(data, indent=0, ensure_ascii=False).encode("utf-8")


#: transform name (dhp/resources/data_registry.json) -> upstream bytes -> the data root's bytes
TRANSFORMS = {"bartscore_pickle_to_json": _bartscore_pickle_to_json}
