"""The result store: Hive-layout Parquet under the output dir, plus DuckDB views.

Layout (`model` and `shard` are also real columns in every file):
    <out>/<bench>/dataset/shard=<s>/part-0.parquet                    (the problems of shard s)
    <out>/<bench>/dataset/selection.json                              (every selected index)
    <out>/<bench>/shard_results/model=<m>/shard=<s>/part-0.parquet   (+ _fingerprint.json)
    <out>/<bench>/bundle/model=<m>/bundle.parquet                    (+ bundle.json)
    <out>/<bench>/report/model=<m>/report.md
    <out>/<bench>/_journal/model=<m>/shard=<s>/journal-<fp>.jsonl    (while a shard runs)
Parquet is written once, to a temporary name, then renamed: readers never see a partial
file and never block writers (no DuckDB database file on the write path).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pyarrow is imported where Parquet is read or written: not by the CLI's
    import pyarrow as pa  # start-up, a plan, or the path to a run's first request


_SLUG_RE = re.compile(r"[^a-z0-9_.-]+")


def slugify(name: str) -> str:
    """A partition-key / path-safe form of a model or service name."""
    s = _SLUG_RE.sub("-", name.strip().lower()).strip("-.")
    return s or "model"


def asset_name(name: str) -> str:
    """An asset-key-safe form of a benchmark name (letters, digits, underscores)."""
    s = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")
    return s if s and not s[0].isdigit() else f"b_{s}"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON via a temp file + rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)


def write_text_atomic(path: Path, text: str) -> None:
    """Write a text file via a temp file + rename (a crash never leaves a torn file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_parquet_atomic(path: Path, table: pa.Table) -> None:
    """Write one Parquet file via a temp name + rename (never a partial file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    import pyarrow.parquet as pq

    import nel_resources.storage.arrow  # noqa: F401 (pyarrow without pandas)

    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


class ResultStore:
    """Paths and reads/writes of one output directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()

    # ------------------------------------------------------------------ paths
    def bench_dir(self, bench: str) -> Path:
        return self.root / asset_name(bench)

    def dataset_path(self, bench: str) -> Path:
        """The whole dataset in one file, as stores written before the dataset was
        partitioned by shard hold it (read, never written)."""
        return self.bench_dir(bench) / "dataset" / "data.parquet"

    def dataset_shard_path(self, bench: str, shard: int) -> Path:
        """The problems of one shard: the dataset asset's partition `shard`."""
        return self.bench_dir(bench) / "dataset" / f"shard={shard}" / "part-0.parquet"

    def images_dir(self, bench: str) -> Path:
        """The dataset's images, once each, named by content hash (`<sha256>.<ext>`);
        stored rows name them `nel-image:<sha256>`."""
        return self.bench_dir(bench) / "dataset" / "images"

    def dataset_selection_path(self, bench: str) -> Path:
        """Every selected problem index, in selection order (what the shards split)."""
        return self.bench_dir(bench) / "dataset" / "selection.json"

    def dataset_files(self, bench: str) -> list[Path]:
        """Every Parquet file of a benchmark's dataset (shard files, or an older store's
        single file)."""
        d = self.bench_dir(bench) / "dataset"
        return sorted(d.glob("shard=*/part-0.parquet")) or ([p] if (p := d / "data.parquet").exists() else [])

    def shard_dir(self, bench: str, model: str, shard: int) -> Path:
        return self.bench_dir(bench) / "shard_results" / f"model={model}" / f"shard={shard}"

    def shard_path(self, bench: str, model: str, shard: int) -> Path:
        return self.shard_dir(bench, model, shard) / "part-0.parquet"

    def journal_path(self, bench: str, model: str, shard: int, fingerprint: str) -> Path:
        return (self.bench_dir(bench) / "_journal" / f"model={model}" / f"shard={shard}"
                / f"journal-{fingerprint}.jsonl")

    def bundle_dir(self, bench: str, model: str) -> Path:
        return self.bench_dir(bench) / "bundle" / f"model={model}"

    def report_dir(self, bench: str, model: str) -> Path:
        return self.bench_dir(bench) / "report" / f"model={model}"

    def export_dir(self, bench: str, model: str) -> Path:
        """Where (benchmark, model)'s NeMo Evaluator 0.3.0 files go (`eval-*.json`,
        `results.jsonl`, ...).

        0.3.0 keeps one model's files per benchmark folder, `<out>/<bench>/`, and its tools
        find them there; so does nel when the benchmark has one model in this store. With
        several models each gets `<out>/<bench>/models/<model>/<bench>/`, itself a 0.3.0
        output directory (`<out>/<bench>/models/<model>`) that its tools read.
        """
        if self.models(bench) in ([], [model]):
            return self.bench_dir(bench)
        return self.bench_dir(bench) / "models" / model / asset_name(bench)

    def legacy_export_dir(self, bench: str, model: str) -> Path:
        """Where nel wrote its exports before it wrote 0.3.0's layout (swept on rebuild)."""
        return self.bench_dir(bench) / "exports" / model

    # ------------------------------------------------------------------ shards
    def shard_fingerprint(self, bench: str, model: str, shard: int) -> dict[str, Any] | None:
        """The stored fingerprint record of a finished shard (None if absent or torn)."""
        p = self.shard_dir(bench, model, shard) / "_fingerprint.json"
        if not p.exists() or not self.shard_path(bench, model, shard).exists():
            return None
        try:
            return json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def shard_records(self, bench: str, model: str) -> dict[int, dict[str, Any]]:
        """Fingerprint records of every committed shard of (benchmark, model), by shard.

        The same shards `read_shards` reads: a Parquet file with its commit marker.
        """
        base = self.bench_dir(bench) / "shard_results" / f"model={model}"
        out: dict[int, dict[str, Any]] = {}
        if base.exists():
            for d in base.glob("shard=*"):
                s = int(d.name.split("=", 1)[1])
                rec = self.shard_fingerprint(bench, model, s)
                if rec is not None:
                    out[s] = rec
        return dict(sorted(out.items()))

    def write_shard(self, bench: str, model: str, shard: int, table: pa.Table,
                    fingerprint: dict[str, Any]) -> Path:
        """Commit a shard: Parquet first, then its fingerprint (the commit marker)."""
        d = self.shard_dir(bench, model, shard)
        (d / "_fingerprint.json").unlink(missing_ok=True)
        path = self.shard_path(bench, model, shard)
        write_parquet_atomic(path, table)
        write_json_atomic(d / "_fingerprint.json", fingerprint)
        return path

    def commit_shard_file(self, bench: str, model: str, shard: int, written: Path,
                          fingerprint: dict[str, Any]) -> Path:
        """Commit a shard whose Parquet file is already written (at `written`, in the shard's
        folder): the file renamed into place, then its fingerprint (the commit marker)."""
        d = self.shard_dir(bench, model, shard)
        (d / "_fingerprint.json").unlink(missing_ok=True)
        path = self.shard_path(bench, model, shard)
        os.replace(written, path)
        write_json_atomic(d / "_fingerprint.json", fingerprint)
        return path

    def _committed_shard_files(self, bench: str, model: str,
                               shards: Iterable[int] | None = None) -> list[Path]:
        """The Parquet files of the committed shards of (benchmark, model), in shard order
        (a file counts once its commit marker, `_fingerprint.json`, is next to it)."""
        base = self.bench_dir(bench) / "shard_results" / f"model={model}"
        if not base.exists():
            return []
        dirs = sorted(base.glob("shard=*"), key=lambda p: int(p.name.split("=", 1)[1]))
        wanted = None if shards is None else {int(s) for s in shards}
        return [d / "part-0.parquet" for d in dirs
                if (wanted is None or int(d.name.split("=", 1)[1]) in wanted)
                and (d / "part-0.parquet").exists() and (d / "_fingerprint.json").exists()]

    def committed_shard_files(self, bench: str, model: str) -> list[Path]:
        """The Parquet files `read_shards` reads (committed shards only), for DuckDB queries."""
        return self._committed_shard_files(bench, model)

    def read_shards(self, bench: str, model: str, shards: Iterable[int] | None = None,
                    *, columns: Sequence[str] | None = None,
                    dictionary: Sequence[str] = ()) -> pa.Table:
        """All committed shard rows of one (benchmark, model), concatenated.

        `columns` reads only those (the ones a file lacks come out as nulls, as with every
        column when shards of older and newer schemas are concatenated): a bundle needs
        neither the prompts nor the request messages, most of a table's bytes.
        `dictionary` names string columns read dictionary-encoded (one copy of each distinct
        value and a code per row: repeated texts such as categories or scoring details cost
        4 bytes a row, not their length), with one dictionary across the shards.
        """
        import pyarrow.parquet as pq

        from nel_resources.storage.arrow import pa
        from nel_resources.storage.schema import empty_results

        tables = []
        for f in self._committed_shard_files(bench, model, shards):
            # One file, read as such: `pq.read_table` would go through the datasets layer
            # (its code alone is ~8 MB of resident pages) for the same table.
            with pq.ParquetFile(f, read_dictionary=list(dictionary) or None) as pf:
                cols = None if columns is None else [c for c in columns if c in pf.schema_arrow.names]
                tables.append(pf.read(columns=cols))
        if not tables:
            empty = empty_results()
            return empty if columns is None else empty.select([c for c in columns if c in empty.column_names])
        if dictionary:
            # the same column type in every file (a file lacking the column adds nulls)
            want = {f.name: f.type for t in tables for f in t.schema if f.name in dictionary}
            tables = [t.cast(pa.schema([pa.field(f.name, want.get(f.name, f.type)) for f in t.schema]))
                      if any(t.schema.field(n).type != ty for n, ty in want.items() if n in t.column_names)
                      else t for t in tables]
            return pa.concat_tables(tables, promote_options="default").unify_dictionaries()
        return pa.concat_tables(tables, promote_options="default")

    def shard_columns(self, bench: str, model: str, *, columns: Sequence[str],
                      dictionary: Sequence[str] = ()) -> ShardColumns:
        """The committed rows of (benchmark, model) as `ShardColumns`: each column is read
        from the files when asked for, and not kept (see there)."""
        return ShardColumns(self._committed_shard_files(bench, model), columns, dictionary)

    def iter_shard_batches(self, bench: str, model: str, *, batch_size: int = 256,
                           columns: Sequence[str] | None = None, start_row: int = 0) -> Iterator[pa.RecordBatch]:
        """The rows `read_shards` returns, in the same order, `batch_size` at a time.

        One file is decoded a batch at a time: a caller that turns rows into Python objects
        (the 0.3.0 exports) never holds more than a batch of them, nor the whole table.
        A batch of an older shard file simply lacks the columns added since. `columns`
        reads only those (the ones a file has). `start_row` skips that many rows first,
        whole files and row groups without decoding them (the second half of the exports).
        """
        import pyarrow.parquet as pq

        import nel_resources.storage.arrow  # noqa: F401 (pyarrow without pandas)

        skip = start_row
        for f in self._committed_shard_files(bench, model):
            with pq.ParquetFile(f) as pf:
                groups = []
                for g in range(pf.num_row_groups):
                    n = pf.metadata.row_group(g).num_rows
                    if skip >= n and not groups:
                        skip -= n  # before the start: not even decoded
                    else:
                        groups.append(g)
                if not groups:
                    continue
                # One thread: a batch is too small for Arrow's thread pool to pay off (on a
                # 42,208-row shard it cost ~25% more CPU, and no less wall time, than this).
                cols = None if columns is None else [c for c in columns if c in pf.schema_arrow.names]
                for batch in pf.iter_batches(batch_size=batch_size, row_groups=groups, columns=cols,
                                             use_threads=False):
                    if skip:  # the start falls inside this row group
                        if skip >= batch.num_rows:
                            skip -= batch.num_rows
                            continue
                        batch, skip = batch.slice(skip), 0
                    yield batch

    def models(self, bench: str) -> list[str]:
        """Model keys with at least one committed shard."""
        base = self.bench_dir(bench) / "shard_results"
        if not base.exists():
            return []
        return sorted(p.name.split("=", 1)[1] for p in base.glob("model=*"))

    def benchmarks(self) -> list[str]:
        """Benchmark folders with results."""
        if not self.root.exists():
            return []
        return sorted(p.name for p in self.root.iterdir()
                      if p.is_dir() and (p / "shard_results").exists())

    # ------------------------------------------------------------------ bundles
    def write_bundle(self, bench: str, model: str, bundle: dict[str, Any], flat: pa.Table) -> Path:
        d = self.bundle_dir(bench, model)
        write_parquet_atomic(d / "bundle.parquet", flat)
        write_json_atomic(d / "bundle.json", bundle)
        return d / "bundle.json"

    def read_bundle(self, bench: str, model: str) -> dict[str, Any] | None:
        p = self.bundle_dir(bench, model) / "bundle.json"
        return json.loads(p.read_text()) if p.exists() else None


class ShardColumns:
    """A (benchmark, model)'s committed rows, read one column at a time when asked for.

    Has the table methods a bundle build uses (`column`, `column_names`, `num_rows`,
    `select`), with the rows of `read_shards(columns=..., dictionary=...)`, but keeps no
    column: each `column()` reads it from the Parquet files again and the caller's
    reference is the only one. A bundle over 1,000,000 rows held its whole table (114 MB)
    through every statistic; this way only the columns one statistic is working on are in
    memory, and re-reading a column costs milliseconds.
    """

    def __init__(self, files: Sequence[Path], columns: Sequence[str], dictionary: Sequence[str] = ()) -> None:
        import pyarrow.parquet as pq

        import nel_resources.storage.arrow  # noqa: F401 (pyarrow without pandas)

        self._files = list(files)
        self._dictionary = [c for c in dictionary if c in columns]
        names: set[str] = set()
        self.num_rows = 0
        for f in self._files:
            with pq.ParquetFile(f) as pf:
                names.update(pf.schema_arrow.names)
                self.num_rows += pf.metadata.num_rows
        # the columns some file has, in the order asked (a file lacking one reads nulls)
        self.column_names = [c for c in columns if c in names]

    def _type(self, name: str) -> pa.DataType:
        from nel_resources.storage.arrow import pa
        from nel_resources.storage.schema import RESULT_SCHEMA

        t = RESULT_SCHEMA.field(name).type if name in RESULT_SCHEMA.names else pa.string()
        return pa.dictionary(pa.int32(), t) if name in self._dictionary else t

    def column(self, name: str) -> pa.ChunkedArray:
        """One column of every committed row, read now."""
        import pyarrow.parquet as pq

        from nel_resources.storage.arrow import pa

        if name not in self.column_names:
            raise KeyError(name)
        want = self._type(name)
        chunks = []
        for f in self._files:
            with pq.ParquetFile(f, read_dictionary=[name] if name in self._dictionary else None) as pf:
                if name in pf.schema_arrow.names:
                    col = pf.read(columns=[name]).column(0)
                    chunks += (col if col.type == want else col.cast(want)).chunks
                else:
                    chunks.append(pa.nulls(pf.metadata.num_rows, type=want))
        out = pa.chunked_array(chunks, type=want)
        return out.unify_dictionaries() if name in self._dictionary else out

    def select(self, names: Sequence[str]) -> pa.Table:
        """Those columns (the ones there are) as one table, read now."""
        from nel_resources.storage.arrow import pa

        keep = [c for c in names if c in self.column_names]
        return pa.table({c: self.column(c) for c in keep})
