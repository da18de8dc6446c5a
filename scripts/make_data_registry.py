"""Write dhp/resources/data_registry.json: every input file the workbench reads, declared once.

    .venv/bin/python scripts/make_data_registry.py DATA_ROOT [MIRRORS]

DATA_ROOT is a complete data root (no default; on the development machines: ../shared/datasets); MIRRORS a folder of bare git clones named
``<owner>+<repo>/repo`` of the upstream repositories. Each file's size and sha256 are computed from DATA_ROOT;
with MIRRORS, each upstream path is checked against the repository's tree at the pinned commit (same git blob
id, i.e. the same bytes; for a re-serialised file: the path exists) and the script stops at the first
mismatch. The data sets' titles, licences and uses are declared in SETS below: edit them here, then rerun.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "dhp" / "resources" / "data_registry.json"

#: upstream repositories at their pinned commits (full hashes, checked with `git rev-parse` on the mirrors)
SOURCES = {
    "summac": ("tingofurro/summac", "46056e54e3f30a47655d2d2e76150ad428f58224", "Apache-2.0"),
    "bartscore": ("neulab/BARTScore", "248f511cb34ae3753fc81f7d7a945de5bfe33458", "Apache-2.0"),
    "summeval": ("Yale-LILY/SummEval", "81b59ad53d63cb6009764240853c91235a44e238", "MIT"),
    "llm_summeval": ("DAMO-NLP-SG/LLM_summeval", "bd7dde15817a88940c17574973ff03e750356daa", "none stated"),
    "sumpubmed": ("vgupta123/sumpubmed", "c190db237ba5b8c01efd247e45d13cf0c8162842", "MIT"),
    "pubmedqa": ("pubmedqa/pubmedqa", "1cbae8e92f72f20c8d3747cbb3bf5bc53554d997", "MIT"),
    "wmt22": ("wmt-conference/wmt22-news-systems", "20240a2e96a50e823ea8cdf37fd8af52547146e3", "research use"),
    "gptmt": ("microsoft/gpt-MT", "d64e21fbc0fa60f3e9ca70bfe4cddf1488177531", "MIT"),
    "mtme": ("florethsong/mtme-zh-mwe", "78ea1631766a57553ac97ee21380c09b06ad6918", "Apache-2.0"),
    "hu2024": ("PKU-ONELab/LLM-evaluator-reliability", "988ca2b64aebb9a3e1c18019080f498068a579a6", "Apache-2.0"),
    "llmbar": ("princeton-nlp/LLMBar", "900616bff90b6c6c8e1681f7d079250637c55992", "MIT"),
    "hanna": ("dig-team/hanna-benchmark-asg", "282f27536a5d05ad4ce14298abcd70c45668fed2", "MIT"),
    "frank": ("artidoro/frank", "80a88fb12cc0bfc17ff6ee2c5ebb0c4f4dd8a5f4", "MIT"),
    "gemba": ("MicrosoftTranslator/GEMBA", "a7a7eff8e46998447c6cbf09d06affc8f1b99ab4", "CC BY-SA 4.0"),
    "ae": ("google-research-datasets/answer-equivalence-dataset", "5032298f3fe69bebab4a013de5606231a948cebc",
           "Apache-2.0"),
}

# name -> title, licence, needed for, fetch ("open": fetched on need; "user": never fetched), in the demo,
# optional (not part of `data fetch --all`'s promise that everything the methods read is there)
SETS = {
    "summeval": ("SummEval articles, references, 16 systems' summaries, 3-expert mean scores (Fabbri et al. 2021)",
                 "MIT (SummEval); article text (c) CNN/DailyMail, research use",
                 "load_dataset('summeval'); methods dhp, criteria_confusion, decompose_aggregate, dual_perspective",
                 "open", True, False),
    "summeval_annotators": ("SummEval per-annotator expert ratings, 12 abstractive systems",
                            "MIT (SummEval annotations); article text (c) CNN/DailyMail, research use",
                            "methods dual_perspective, human_alignment", "open", True, False),
    "sumpubmed": ("SumPubMed articles 1-500 and abstracts (Gupta et al. 2021)",
                  "MIT; upstream README: non-commercial academic use", "load_dataset('sumpubmed')", "open", False,
                  False),
    "pubmedqa": ("PubMedQA-L, 1,000 expert-labelled questions (Jin et al. 2019)", "MIT",
                 "load_dataset('pubmedqa')", "open", False, False),
    "storycloze": ("Story Cloze Test, spring 2016 validation set (Mostafazadeh et al. 2017)",
                   "not openly licensed: request form at cs.rochester.edu/nlp/rocstories",
                   "load_dataset('storycloze') (user-supplied; nothing in the demo needs it)", "user", False, True),
    "answer_equivalence": ("Answer Equivalence dev/test (Bulian et al. 2022)", "Apache-2.0",
                           "load_dataset('answer_equivalence')", "open", False, True),
    "wmt22_de_en": ("WMT22 general test set de-en: source, references A/B, document ids", "WMT: research use",
                    "load_dataset('wmt22_de_en')", "open", False, False),
    "wmt22_zh_en": ("WMT22 general test set zh-en: source, references A/B, document ids", "WMT: research use",
                    "load_dataset('wmt22_zh_en'); method human_alignment (MQM segments)", "open", True, False),
    "wmt22_da_zh_en": ("WMT22 crowd DA segment scores zh-en", "WMT: research use",
                       "method human_alignment (DA beside MQM)", "open", True, False),
    "wmt22_da_de_en": ("WMT22 crowd DA segment scores de-en", "WMT: research use",
                       "dhp.datasets.wmt22_human.load_da('de-en')", "open", False, False),
    "wmt22_mqm_zh_en": ("WMT22 zh-en MQM segment scores, system outputs, documents (Freitag et al. 2022)",
                        "Apache-2.0", "method human_alignment; leaderboard mtme view", "open", True, False),
    "wmt22_metric_scores_zh_en": ("WMT22 Metrics Shared Task segment scores, zh-en, 52 files", "Apache-2.0",
                                  "leaderboard recorded mtme; import-judgments mtme", "open", True, False),
    "criteria_hu2024": ("Criteria descriptions of Hu et al. 2024 (11 aspects)", "Apache-2.0",
                        "method criteria_confusion", "open", True, False),
    "llmbar": ("LLMBar pairs: Natural and four Adversarial subsets (Zeng et al. 2023)", "MIT",
               "method decompose_aggregate; import-judgments table (LLMBar id check)", "open", True, False),
    "llmbar_judgments": ("LLMBar's recorded verdicts of GPT-4, ChatGPT, PaLM2, LLaMA2, Falcon (349 result.json)",
                         "MIT", "leaderboard recorded llmbar; import-judgments llmbar", "open", True, False),
    "llmbar_prompts": ("LLMBar's evaluator prompt templates and per-judge configurations", "MIT",
                       "live judges with LLMBar's own prompts (read at run time, never copied)", "open", True, False),
    "hanna": ("HANNA story ratings, 72 metrics and LLM judges' ratings (Chhun et al. 2022, 2024)", "MIT",
              "leaderboard hanna view", "open", True, False),
    "frank": ("FRANK factuality annotations and 15 metrics' outputs (Pagnoni et al. 2021)", "MIT",
              "leaderboard frank view", "open", True, False),
    "gemba": ("GEMBA (Kocmi & Federmann 2023): 7 LLM judges x 4 prompt styles x {src, refA} on WMT22 zh-en, "
              "segment and system scores (112 files), and the prompts, parsing and retry rule that made them",
              "CC BY-SA 4.0: attribute; share derived data alike",
              "import-judgments gemba; leaderboard recorded gemba; live gemba:* protocols (read at run time)",
              "open", False, False),
    "hanna_texts": ("HANNA story texts and per-worker annotations", "MIT",
                    "live judges on hanna/frank views", "open", False, True),
    "frank_texts": ("FRANK articles and summaries (benchmark_data.json)", "MIT",
                    "live judges on hanna/frank views", "open", False, True),
}

#: files not in the development copy: (set, relative path, source, upstream path, git blob id, bytes, sha256)
EXTRA = [
    ("answer_equivalence", "answer_equivalence/ae_dev.jsonl", "ae", "v1/ae_dev.jsonl",
     "650787e63635750842469eeea019f8fdaf42758d", 5363295,
     "9ec7b8f1136a0363753fbbde0d73c32e5cf26551938378eda27d1c860743cd9f"),
    ("answer_equivalence", "answer_equivalence/ae_test.jsonl", "ae", "v1/ae_test.jsonl",
     "b82ede7153df2b9e47c0c2ad4c24d3a8776b9820", 10469219,
     "7470acdfae03fa662740fb453b508de4e2c4dd1ec113a49142c017d59554202f"),
    # too large for the development copy: size and sha256 unknown here, checked by their git blob id instead
    ("hanna_texts", "hanna/hanna_stories_annotations.csv", "hanna", "hanna_stories_annotations.csv",
     "2eec3bbf5b1363a998dbf73199228e4fe13405ca", None, None),
    ("frank_texts", "frank/benchmark_data.json", "frank", "data/benchmark_data.json",
     "b468e2ef48f0a98b4d793ff8730d648d6b3c657c", None, None),
]


def classify(rel: str) -> tuple[str, str, str | None, str | None]:
    """(set, source, upstream path or None = find it by blob id, transform) of a file of the data root."""
    top, _, rest = rel.partition("/")
    name = rel.rsplit("/", 1)[-1]
    if top == "summeval":
        if name == "summac_summeval.json":
            return "summeval", "summac", "data/summeval.json", None
        if name == "bartscore_summeval.json":
            return "summeval", "bartscore", "SUM/SummEval/data.pkl", "bartscore_pickle_to_json"
        return "summeval", "summeval", "LICENSE", None
    if top == "summeval_annotators":
        return "summeval_annotators", "llm_summeval", f"model_output_annotations/{name}", None
    if top == "sumpubmed":
        return "sumpubmed", "sumpubmed", "README.md" if rest == "README.upstream.md" else rest, None
    if top == "pubmedqa":
        return "pubmedqa", "pubmedqa", "data/ori_pqal.json" if name.endswith(".json") else "LICENSE", None
    if top == "storycloze":
        return "storycloze", "", None, None
    if top == "criteria_hu2024":
        return "criteria_hu2024", "hu2024", name, None
    if top == "llmbar":
        if name == "LICENSE":
            return "llmbar", "llmbar", "LICENSE", None
        sub = name.removesuffix(".json")
        path = "Natural" if sub == "Natural" else "Adversarial/" + sub.removeprefix("Adversarial_")
        return "llmbar", "llmbar", f"Dataset/LLMBar/{path}/dataset.json", None
    if top == "llmbar_judgments":
        return "llmbar_judgments", "llmbar", "LICENSE" if rest == "LICENSE" else f"Dataset/{rest}", None
    if top == "llmbar_prompts":
        return "llmbar_prompts", "llmbar", "LICENSE" if rest == "LICENSE" else f"LLMEvaluator/evaluators/{rest}", None
    if top == "hanna":
        return "hanna", "hanna", name, None
    if top == "frank":
        return "frank", "frank", name if name == "LICENSE" else f"data/{name}", None
    if top == "gemba":  # upstream layout kept: the path below gemba/ is the repository path
        return "gemba", "gemba", rest, None
    if top == "wmt22":
        sub, _, inner = rest.partition("/")
        pair = "zh_en" if "zh-en" in name or sub in ("mqm_zh-en", "metric-scores_zh-en") else "de_en"
        if sub == "txt":
            kind = "sources" if ".src." in name else "references"
            return f"wmt22_{pair}", "wmt22", f"txt/{kind}/{name}", None
        if sub == "docids":
            return f"wmt22_{pair}", "gptmt", f"evaluation/testset/wmt-testset-docids/{pair.replace('_', '')}/{name}", None
        if sub == "humaneval_da":
            if name == "README.txt":
                return "wmt22_da_zh_en", "wmt22", "humaneval/DA/README.txt", None
            return f"wmt22_da_{pair}", "wmt22", None, None
        if sub == "mqm_zh-en":
            return "wmt22_mqm_zh_en", "mtme", None if inner != "LICENSE" else "LICENSE", None
        if sub == "metric-scores_zh-en":
            return "wmt22_metric_scores_zh_en", "mtme", f"raw_wmt22/metric-scores/zh-en_all/{name}", None
    raise SystemExit(f"no rule for {rel}: add one to classify()")


#: the registry as last written: a run without MIRRORS keeps the upstream paths an earlier run found by blob id
_PREVIOUS = json.loads(OUT.read_text(encoding="utf-8"))["files"] if OUT.is_file() else {}


def git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Trees:
    def __init__(self, mirrors: Path | None):
        self.mirrors, self.cache = mirrors, {}

    def tree(self, src: str) -> dict[str, str] | None:
        if self.mirrors is None:
            return None
        if src not in self.cache:
            repo, commit, _ = SOURCES[src]
            git = self.mirrors / repo.replace("/", "+") / "repo"
            out = subprocess.run(["git", "-C", str(git), "ls-tree", "-r", commit], check=True,
                                 capture_output=True, text=True).stdout
            self.cache[src] = {ln.split("\t", 1)[1]: ln.split()[2] for ln in out.splitlines()}
        return self.cache[src]

    def blob(self, src: str, path: str) -> bytes | None:
        """The upstream file's bytes (None without mirrors)."""
        if self.mirrors is None:
            return None
        repo, commit, _ = SOURCES[src]
        git = self.mirrors / repo.replace("/", "+") / "repo"
        return subprocess.run(["git", "-C", str(git), "cat-file", "blob", f"{commit}:{path}"], check=True,
                              capture_output=True).stdout

    def resolve(self, rel: str, src: str, path: str | None, blob: str, transform: str | None) -> str:
        tree = self.tree(src)
        if tree is None:
            if path is None:  # found by blob id on an earlier run with MIRRORS: keep what it found
                known = _PREVIOUS.get(rel, {}).get("path")
                if known is None:
                    raise SystemExit(f"{rel}: its upstream path is found by blob id; pass MIRRORS")
                return known
            return path
        if path is None:  # same bytes somewhere in the tree: prefer the same file name
            hits = [p for p, b in tree.items() if b == blob]
            named = [p for p in hits if p.rsplit("/", 1)[-1] == rel.rsplit("/", 1)[-1]]
            if len(named or hits) != 1:
                raise SystemExit(f"{rel}: {len(named or hits)} upstream files with its bytes in {src}: {hits[:5]}")
            return (named or hits)[0]
        if path not in tree:
            raise SystemExit(f"{rel}: {path} is not in {SOURCES[src][0]} @ {SOURCES[src][1]}")
        if transform is None and tree[path] != blob:
            raise SystemExit(f"{rel}: {SOURCES[src][0]}:{path} has other bytes (blob {tree[path]} != {blob})")
        return path


def main(data_root: Path, mirrors: Path | None) -> None:
    trees = Trees(mirrors)
    files = {}
    for p in sorted(data_root.rglob("*")):
        rel = p.relative_to(data_root).as_posix()
        if not p.is_file() or rel == "SOURCES.md":
            continue
        data = p.read_bytes()
        dset, src, path, transform = classify(rel)
        entry = {"set": dset, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        if src:
            entry |= {"source": src, "path": trees.resolve(rel, src, path, git_blob(data), transform)}
        if transform:
            entry["transform"] = transform
            upstream = trees.blob(src, entry["path"])
            if upstream is not None:
                entry |= {"upstream_bytes": len(upstream), "upstream_sha256": hashlib.sha256(upstream).hexdigest()}
            else:  # without MIRRORS: what an earlier run measured on the upstream file
                entry |= {k: v for k, v in _PREVIOUS.get(rel, {}).items() if k.startswith("upstream_")}
        files[rel] = entry
    for dset, rel, src, path, blob, size, sha in EXTRA:
        tree = trees.tree(src)
        if tree is not None and tree.get(path) != blob:
            raise SystemExit(f"{rel}: {SOURCES[src][0]}:{path} is not blob {blob}")
        files[rel] = {"set": dset, "bytes": size, "sha256": sha, "source": src, "path": path, "git_blob": blob}
    unknown = {f["set"] for f in files.values()} - set(SETS)
    if unknown:
        raise SystemExit(f"sets without a declaration: {sorted(unknown)}")
    out = {
        "about": "Every input file of the workbench, declared once: generated by scripts/make_data_registry.py "
                 "from a complete data root; read by dhp.datasets.declared_files.",
        "raw_base": "https://raw.githubusercontent.com",
        "sources": {k: {"repository": r, "commit": c, "licence": lic} for k, (r, c, lic) in SOURCES.items()},
        "sets": {k: {"title": t, "licence": lic, "needed_for": use, "fetch": how, "demo": demo, "optional": opt}
                 for k, (t, lic, use, how, demo, opt) in SETS.items()},
        "files": files,
    }
    # one file per line: a changed file is a one-line diff
    lines = [json.dumps({k: v for k, v in out.items() if k != "files"}, indent=1, sort_keys=True)[:-2] + ",",
             ' "files": {']
    body = [f"  {json.dumps(rel)}: {json.dumps(e, sort_keys=True)}" for rel, e in sorted(files.items())]
    OUT.write_text("\n".join(lines + [",\n".join(body), " }", "}"]) + "\n", encoding="utf-8")
    json.loads(OUT.read_text(encoding="utf-8"))
    print(f"{len(files)} files in {len(SETS)} sets -> {OUT}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
