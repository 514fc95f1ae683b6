"""An NDJSON dataset the plan checked (jobspec/ndjson.py) converted once into Ultralytics' layout, in the tool's
cache under a name from the file's content (`datasets/ndjson-<digest>/`), as a COCO dataset is
(coco_convert.py: the same scratch-and-rename publication, images as links to the user's files):

    images/<split>/<file>     a link to the user's image
    labels/<split>/<stem>.txt its annotations, one label line each (they are YOLO label lines already)
    data.yaml                 path, the splits, the class names (pose: kpt_shape), the source"""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import UserError
from orchestrator.jobspec.coco_convert import link_image, publish
from orchestrator.jobspec.ndjson import SPLITS, NdjsonData, read_ndjson
from orchestrator.rundir import dump_yaml

CONVERTED = "ndjson-{}"


def converted_yaml(cache: Path, data: NdjsonData) -> Path:
    """Where the converted copy's data.yaml is (or will be): `cache` is the tool's datasets folder."""
    return cache / CONVERTED.format(data.digest[:16]) / "data.yaml"


def convert(source: Path, expect: Path) -> Path:
    """The converted copy's data.yaml at `expect` (the plan's), made when missing. A file that changed since the
    plan named its copy is refused: the run would train on other labels than it planned."""
    if expect.is_file():
        return expect
    data = read_ndjson(Path(source))
    if converted_yaml(expect.parents[1], data) != expect:
        raise UserError(f"data.ndjson: {source} changed since the run was planned ({expect.parent.name} no longer "
                        "matches it); plan and submit the job again")

    return publish(expect, lambda scratch: write_dataset(data, scratch, expect.parent), "data.ndjson")


def write_dataset(data: NdjsonData, folder: Path, root: Path | None, place=link_image) -> None:
    """The YOLO dataset into `folder`: each image placed by `place(source, target)` (a link, or a copy for
    `data import`), its labels, and a data.yaml whose `path:` is `root` (None: none, so Ultralytics reads the
    yaml's own folder: a dataset that can be moved)."""
    for image in data.images:
        place(image.source, folder / "images" / image.split / image.file)
        if image.labels:  # an image without a label file is background, as Ultralytics reads it
            label = (folder / "labels" / image.split / image.file).with_suffix(".txt")
            label.parent.mkdir(parents=True, exist_ok=True)
            label.write_text("".join(_line(values) for values in image.labels))
    (folder / "data.yaml").write_text(_data_yaml(root, data))


def _data_yaml(root: Path | None, data: NdjsonData) -> str:
    doc = {**({"path": str(root)} if root else {}), **{split: f"images/{split}" for split in SPLITS if data.split(split)},
           "names": dict(enumerate(data.names))}
    if data.kpt_shape:
        doc["kpt_shape"] = list(data.kpt_shape)
    return f"# converted by yolo-orch from NDJSON ({data.digest[:16]}): {data.file.resolve()}\n" + dump_yaml(doc)


def _line(values: tuple[float, ...]) -> str:
    return " ".join([str(int(values[0])), *(f"{v:.6g}" for v in values[1:])]) + "\n"


MAX_IMAGE = 256 << 20  # one image: 256 MiB is no photograph
DOWNLOAD_TIMEOUT_S = 60


def download_image(url: str, target: Path) -> None:
    """One image an NDJSON file names only by URL, fetched when asked (`data import --download`): written
    whole or not at all, at most MAX_IMAGE bytes; a failure is one line naming the host, never the URL's
    query (a Platform export's URLs are signed)."""
    import urllib.error
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    shown = f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}{parts.path}"  # no user:password, no query
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:  # noqa: S310 - http(s) only
            body = response.read(MAX_IMAGE + 1)
    except urllib.error.HTTPError as exc:
        raise UserError(f"--download: {shown}: HTTP {exc.code} (an export's signed URLs expire: export again)") from None
    except (urllib.error.URLError, OSError) as exc:
        raise UserError(f"--download: {shown}: {getattr(exc, 'reason', exc)}") from None
    if len(body) > MAX_IMAGE:
        raise UserError(f"--download: {shown} is larger than {MAX_IMAGE >> 20} MiB")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(body)  # inside the import's scratch folder: published whole by its rename
