"""Files under one root folder on any Hadoop-compatible file system (local, HDFS, S3A, ABFS,
GCS...), through the Hadoop ``FileSystem`` API of the Spark driver's JVM, so the archive job
handles its files exactly where and how Spark writes its Parquet.

Only operations every such file system has are used: create a new file, open, list, rename,
delete. No append (object stores have none): the run log writes one small file per record.
A file is written under a hidden temporary name and renamed into place, so a reader never
sees half a record. Needs a classic SparkSession (Spark Connect has no driver JVM to ask).
"""

from __future__ import annotations

from typing import Any

#: Names Spark and Hadoop keep for themselves (``_SUCCESS``, ``_temporary``, ``.crc``
#: checksums): never data files, and what Spark's readers skip too.
HIDDEN_PREFIXES = ("_", ".")


def hidden(name: str) -> bool:
    """True for a file or folder name that readers of the data skip."""
    return name.startswith(HIDDEN_PREFIXES)


class HadoopFiles:
    """The files under ``root`` (a path or URI; a relative path is the driver's working
    folder's). Paths given to and returned by the methods are relative to the root."""

    def __init__(self, spark: Any, root: str) -> None:
        jvm = spark.sparkContext._jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        path = self._Path(root)
        self._fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        #: The root as a fully qualified URI (``file:/...``, ``s3a://bucket/...``).
        self.root = str(self._fs.makeQualified(path).toString()).rstrip("/")

    def uri(self, rel: str) -> str:
        """The qualified URI of ``rel`` (Spark reads and writes by URI)."""
        return f"{self.root}/{rel}" if rel else self.root

    def _path(self, rel: str) -> Any:
        return self._Path(self.uri(rel))

    def exists(self, rel: str) -> bool:
        return bool(self._fs.exists(self._path(rel)))

    def names(self, rel: str) -> list[str]:
        """The names in folder ``rel``, sorted (empty when it does not exist)."""
        if not self.exists(rel):
            return []
        return sorted(str(s.getPath().getName()) for s in self._fs.listStatus(self._path(rel)))

    def data_files(self, rel: str) -> list[str]:
        """Every file under folder ``rel`` that is not hidden at any level, relative to
        ``rel``, sorted."""
        if not self.exists(rel):
            return []
        base = self.uri(rel) + "/"
        found = []
        files = self._fs.listFiles(self._path(rel), True)
        while files.hasNext():
            full = str(files.next().getPath().toString())
            relative = full.removeprefix(base)
            if relative != full and not any(hidden(part) for part in relative.split("/")):
                found.append(relative)
        return sorted(found)

    def rename(self, src: str, dst: str) -> None:
        """Move file ``src`` to ``dst`` (whose folder is created); raise if it did not move."""
        target = self._path(dst)
        self._fs.mkdirs(target.getParent())
        if not self._fs.rename(self._path(src), target):
            raise OSError(f"could not move {self.uri(src)} to {self.uri(dst)}")

    def delete(self, rel: str) -> None:
        """Delete file or folder ``rel`` (a folder with everything in it), if it exists."""
        self._fs.delete(self._path(rel), True)

    def write_text(self, rel: str, text: str) -> None:
        """Create file ``rel`` holding ``text`` (UTF-8), all or nothing: written under a
        hidden name in the same folder, then renamed into place."""
        target = self._path(rel)
        temporary = self._Path(target.getParent(), f".{target.getName()}.tmp")
        stream = self._fs.create(temporary, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
        if not self._fs.rename(temporary, target):
            self._fs.delete(temporary, False)
            raise OSError(f"could not create {self.uri(rel)}")

    def read_text(self, rel: str) -> str:
        stream = self._fs.open(self._path(rel))
        try:
            return bytes(stream.readAllBytes()).decode("utf-8")
        finally:
            stream.close()
