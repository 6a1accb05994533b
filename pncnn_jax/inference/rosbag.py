r"""Complete the depth of a ROS 2 bag: depth images, or LiDAR point clouds with a camera, in; a new bag out.

  python -m pncnn_jax.inference.rosbag --input IN --output OUT --depth_topic /camera/depth/image_raw
  python -m pncnn_jax.inference.rosbag --input IN --output OUT --points_topic /velodyne_points \
      --camera_info_topic /camera/camera_info [--calib lidar_to_camera.yaml]
      [--checkpoint synthetic:<name> | PATH] [--namespace /pncnn] [--fill_unsupported] [--progress auto|on|off]

Needs the `ros` extra (`pip install 'pncnn_jax[ros]'`: the pure-Python `rosbags` package; no ROS installation).
IN is a rosbag2 directory (or its .db3 / .mcap file); it is only read. OUT must not exist: a new rosbag2
directory (sqlite3 storage, rosbag2 format version 9) holding, per input frame,

  <namespace>/depth        sensor_msgs/Image 32FC1, metres: the completed depth z along the optical axis; NaN (REP
                           118's "no value" for float depth) where it is not valid
  <namespace>/sigma        sensor_msgs/Image 32FC1, metres: its predicted standard deviation (a model with a sigma,
                           `Completer.has_sigma`); for a model without one, <namespace>/confidence instead: the
                           output confidence (unitless, not calibrated; it ranks pixels); NaN where depth is
  <namespace>/valid        sensor_msgs/Image mono8: 255 where the depth is valid, 0 where it is not
  <namespace>/camera_info  sensor_msgs/CameraInfo: the frame's camera (when the input bag has one)

each with the input frame's header (its stamp; its frame_id for depth images, the camera's frame_id for point
clouds, whose depth map lies in the camera) and written at the input message's bag time. Valid pixels are
`Completion.valid` (pncnn_jax.inference.completer): a measurement within 8 pixels (input support) and a network
depth that is not negative. Elsewhere (e.g. the rows above a LiDAR) the network extrapolates, and a 0 or a value
there would be a point to depth_image_proc; --fill_unsupported writes the network's values there anyway (depth
clamped at 0: every pixel a number), with <namespace>/valid still marking them. A frame without any measurement
is written as NaN depth and sigma, valid all 0, and counted in the summary.
Input density: each frame's (`pncnn_jax.data.input_contract.input_density`, the share of pixels holding a
measurement within the rows spanned by measurements) is compared with the range the model was trained on (a
shipped model's manifest; `Completer.trained_density`): the first frame outside it is one warning line, and the
summary states the frames' median density and counts those outside (docs/deploy/sensors.md: which model for which
sensor). A model without a recorded range (an official .pth.tar, a training run) states the density only.
If the conversion fails or is interrupted (an error, a full disk, Ctrl-C, SIGTERM), OUT is removed: nothing
half-written is left under its name; a full disk is one line (exit status 1), SIGTERM one line (exit status 143).
While it runs OUT is the conversion's (a `flock` on it, OUT/RUNNING naming it: a second bag command, predict or
eval.py there stops at once), and OUT/pncnn_writer.json records the model and input that wrote it. A conversion
killed with SIGKILL (no handler runs) leaves OUT without metadata.yaml: a rerun names it a partial conversion, and
--overwrite replaces it. --overwrite also replaces a finished bag this command wrote; nothing else is ever replaced.

Inputs (REP 118), each frame checked against the input contract (pncnn_jax.data.input_contract: the checks and
one-line messages of the Completer and predict):
  --depth_topic        sensor_msgs/Image, 32FC1 in metres (NaN, +-Inf and 0: no measurement; a negative depth is
                       an error) or 16UC1 / mono16 in millimetres (0: no measurement); either byte order, any row
                       padding. Depths that are not metres after that (beyond 1000 m, or a median under 5 cm: a
                       32FC1 image in millimetres or kilometres) are an error naming the message. The camera info
                       is --camera_info_topic, else the image's sibling `<namespace>/camera_info` when the bag has
                       it (ROS's camera convention), else none is written; it is published with the completed
                       depth, so each image must have its size (height x width, less its ROI and binning: REP 104).
  --points_topic       sensor_msgs/PointCloud2 with float32 or float64 fields x, y, z in metres (other fields
                       ignored; NaN points dropped; ranges that are not metres, as for depth images, are an
                       error), with --camera_info_topic (sensor_msgs/CameraInfo, required): the depth map
                       is the camera's rectified image, height x width of the CameraInfo, projected with its P
                       (3x4; K when P is all zero), as `pncnn_jax.data.points.project_points` does (z > 0, the
                       nearest return per pixel, round(u), round(v)): K = P[:, :3], and P's 4th column (a stereo
                       baseline, 0 for a monocular camera) becomes a translation. Each cloud takes the latest
                       CameraInfo stamped at or before it (the first one for clouds before any).
  LiDAR -> camera      the transform from the clouds' frame to the CameraInfo's optical frame (x right, y down,
                       z forward) comes from --calib, a YAML / JSON file with `T_cam_from_lidar` (4x4 or 3x4, the
                       schema of `pncnn_jax.data.points`; K and image_size there are ignored: CameraInfo's win).
                       Without --calib the clouds must already be in the camera's frame (the same frame_id).
                       /tf and /tf_static are not read: a calibration file is explicit, versioned with the data,
                       and does not depend on which transforms a recording happened to capture.

Errors (a bag without the named topic, a topic of another type, an unsupported encoding, an existing OUT, an empty
--input or --output, a frame the input contract refuses, an image of another size than its camera info) are one
line on stderr and exit status 2; nothing is written (OUT is removed when a frame is refused half-way).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import shutil
import signal
import sqlite3
import sys
import time
import warnings
from typing import Any, Callable

import numpy as np

from pncnn_jax.data import input_contract
from pncnn_jax.data import points as points_lib
from pncnn_jax.runtime import cli, run_files
from pncnn_jax.runtime.cli import first_line

IMAGE, CAMERA_INFO, POINTCLOUD2 = "sensor_msgs/msg/Image", "sensor_msgs/msg/CameraInfo", "sensor_msgs/msg/PointCloud2"
DEPTH_ENCODINGS = {"32FC1": ("f4", 1.0), "16UC1": ("u2", 1e-3), "mono16": ("u2", 1e-3)}  # dtype, metres per unit
POINT_DTYPES = {7: "f4", 8: "f8"}  # sensor_msgs/PointField FLOAT32, FLOAT64
BAG_VERSION = 9  # the rosbag2 format version rosbags' Writer writes (ROS 2 Jazzy and newer read it)


def _rosbags():
  """(Reader, Writer, typestore) of the `rosbags` package, or an ImportError saying how to install it."""
  try:
    from rosbags.rosbag2 import Reader, Writer  # pylint: disable=g-import-not-at-top
    from rosbags.typesys import Stores, get_typestore  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(f"ROS bags need the rosbags package: pip install 'pncnn_jax[ros]' ({e})") from None
  return Reader, Writer, get_typestore(Stores.ROS2_HUMBLE)


def image_to_depth(msg: Any, where: str = "image") -> np.ndarray:
  """sensor_msgs/Image (32FC1 metres, 16UC1 / mono16 millimetres) -> (H, W) float32 metres, the values as stored
  (NaN, +-inf and 0 are no measurement; `depth_of` checks them against the input contract)."""
  if msg.encoding not in DEPTH_ENCODINGS:
    raise ValueError(f"{where}: encoding {msg.encoding!r} is not a depth encoding; expected "
                     f"{', '.join(DEPTH_ENCODINGS)} (REP 118)")
  kind, scale = DEPTH_ENCODINGS[msg.encoding]
  dtype = np.dtype((">" if msg.is_bigendian else "<") + kind)
  h, w, step = int(msg.height), int(msg.width), int(msg.step)
  data = np.asarray(msg.data, np.uint8)
  if h < 1 or w < 1 or step < w * dtype.itemsize or data.size < h * step:
    raise ValueError(f"{where}: {data.size} bytes do not hold a {h}x{w} {msg.encoding} image of step {step}")
  rows = data[:h * step].reshape(h, step)[:, :w * dtype.itemsize]
  return (np.ascontiguousarray(rows).view(dtype).astype(np.float64) * scale).astype(np.float32)


def depth_of(msg: Any, where: str = "image") -> np.ndarray:
  """A depth image message -> (H, W) float32 metres, 0 = no measurement, checked against the input contract
  (`pncnn_jax.data.input_contract.check_sparse_depth`, as the Completer and predict check theirs): NaN and +-inf
  are no measurement (REP 118); negative depths and depths that are not metres (beyond 1000 m, or a median under
  5 cm: a 32FC1 image in millimetres or kilometres) are a ValueError naming `where`. A frame without any
  measurement passes (all 0: the command writes it as NaN)."""
  depth = image_to_depth(msg, where)
  hint = f"{msg.encoding} depth images are in {'metres' if msg.encoding == '32FC1' else 'millimetres'} (REP 118)"
  return input_contract.check_sparse_depth(depth, name=where, layouts=(input_contract.HW,), hint=hint,
                                           allow_empty=True)[0]


def pointcloud2_to_xyz(msg: Any, where: str = "cloud") -> np.ndarray:
  """sensor_msgs/PointCloud2 -> (N, 3) float64 x, y, z [m] in the cloud's frame; non-finite points dropped."""
  fields = {f.name: f for f in msg.fields}
  missing = [n for n in "xyz" if n not in fields]
  if missing:
    raise ValueError(f"{where}: no field(s) {', '.join(missing)} (it has {', '.join(fields) or 'none'})")
  bad = [n for n in "xyz" if fields[n].datatype not in POINT_DTYPES]
  if bad:
    raise ValueError(f"{where}: field {bad[0]} has PointField datatype {fields[bad[0]].datatype}; expected FLOAT32 (7) "
                     f"or FLOAT64 (8)")
  order = ">" if msg.is_bigendian else "<"
  step, n_rows, n_cols, row_step = int(msg.point_step), int(msg.height), int(msg.width), int(msg.row_step)
  dtype = np.dtype({"names": list("xyz"), "formats": [order + POINT_DTYPES[fields[n].datatype] for n in "xyz"],
                    "offsets": [int(fields[n].offset) for n in "xyz"], "itemsize": step})
  data = np.asarray(msg.data, np.uint8)
  if step < 1 or row_step < n_cols * step or data.size < n_rows * row_step:
    raise ValueError(f"{where}: {data.size} bytes do not hold {n_rows}x{n_cols} points of {step} bytes "
                     f"(row_step {row_step})")
  rows = data[:n_rows * row_step].reshape(n_rows, row_step)[:, :n_cols * step]
  pts = np.ascontiguousarray(rows).view(dtype).reshape(-1)
  xyz = np.stack([pts[n].astype(np.float64) for n in "xyz"], axis=1)
  return xyz[np.all(np.isfinite(xyz), axis=1)]


def image_size_of(info: Any) -> tuple[int, int]:
  """(H, W) of the images a CameraInfo describes (REP 104): its region of interest when it has one, else its
  height x width, divided by its binning (0 and 1: none)."""
  h, w = int(info.height), int(info.width)
  roi = getattr(info, "roi", None)
  if roi is not None and int(roi.height) > 0 and int(roi.width) > 0:
    h, w = int(roi.height), int(roi.width)
  return h // max(int(info.binning_y), 1), w // max(int(info.binning_x), 1)


def camera_of(info: Any, where: str = "camera_info") -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
  """CameraInfo -> (K (3, 3), T_baseline (4, 4): the translation of P's 4th column, (H, W)): projecting with
  K @ T_baseline[:3] equals P (module doc)."""
  P = np.asarray(info.p, np.float64).reshape(3, 4)
  if not P.any():
    P = np.hstack([np.asarray(info.k, np.float64).reshape(3, 3), np.zeros((3, 1))])
  K = P[:, :3]
  if not (K[0, 0] > 0 and K[1, 1] > 0 and np.allclose(K[2], [0, 0, 1])):
    raise ValueError(f"{where}: P / K is not a calibrated pinhole camera (P = {np.round(P, 3).tolist()})")
  if int(info.height) < 1 or int(info.width) < 1:
    raise ValueError(f"{where}: image size {info.height}x{info.width}")
  T = np.eye(4)
  T[:3, 3] = np.linalg.solve(K, P[:, 3])
  return K, T, (int(info.height), int(info.width))


def _topic(reader: Any, bag: pathlib.Path, flag: str, topic: str, msgtype: str) -> list[Any]:
  """The connections of `topic`, checked: present, of `msgtype`, with messages. One-line errors naming `flag`."""
  conns = [c for c in reader.connections if c.topic == topic]
  if not conns:
    have = ", ".join(f"{t} ({i.msgtype})" for t, i in sorted(reader.topics.items())) or "none"
    raise ValueError(f"{flag} {topic}: no such topic in {bag} (its topics: {have})")
  if any(c.msgtype != msgtype for c in conns):
    raise ValueError(f"{flag} {topic} in {bag} is {conns[0].msgtype}, expected {msgtype}")
  if not sum(c.msgcount for c in conns):
    raise ValueError(f"{flag} {topic}: no messages in {bag}")
  return conns


def _stamp_ns(header: Any) -> int:
  return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


def _camera_infos(reader: Any, conns: list[Any], typestore: Any) -> list[tuple[int, Any]]:
  """[(stamp [ns], CameraInfo)] in stamp order."""
  infos = [typestore.deserialize_cdr(raw, c.msgtype) for c, _, raw in reader.messages(connections=conns)]
  return sorted(((_stamp_ns(i.header), i) for i in infos), key=lambda x: x[0])


def _info_at(infos: list[tuple[int, Any]], stamp: int) -> Any:
  """The latest CameraInfo stamped at or before `stamp`, else the first."""
  before = [i for s, i in infos if s <= stamp]
  return before[-1] if before else infos[0][1]


class BagWriteError(OSError):
  """The new bag could not be written (a full disk, ...): one line naming it; the partial bag was removed."""


def _lock(out: pathlib.Path) -> run_files.WorkdirLock:
  return run_files.WorkdirLock(out, flag="--output", what="bag conversion")


def check_output(output: str | os.PathLike, overwrite: bool = False) -> pathlib.Path:
  """OUT must not exist (a new bag directory), unless `overwrite` and it is a bag this command wrote (it holds our
  pncnn_writer.json): finished (with metadata.yaml) or partial (without: a conversion killed by SIGKILL). A folder
  in use by another conversion, a partial conversion without `overwrite`, or anything else that exists is a
  one-line error naming OUT and the way out. Reads only."""
  run_files.require_path(output, "--output")
  out = pathlib.Path(output)
  record = run_files.read_writer(out) if out.is_dir() and not out.is_symlink() else None
  if record is not None and record.get("command") == "rosbag":
    with _lock(out):  # WorkdirBusyError while a conversion writes it
      pass
    if not (out / "metadata.yaml").is_file():
      if not overwrite:
        raise FileExistsError(f"--output {out} is a partial bag conversion (no metadata.yaml: a conversion of "
                              f"{record.get('input')} was killed before it finished); pass --overwrite to replace it")
    elif not overwrite:
      raise FileExistsError(f"--output {out} already exists (a bag completed from {record.get('input')} with "
                            f"checkpoint {record.get('checkpoint')!r}); pass --overwrite to replace it, or name a new "
                            "bag directory")
  elif out.exists() or out.is_symlink():
    raise FileExistsError(f"--output {out} already exists; name a new bag directory (nothing is overwritten"
                          + ("; --overwrite replaces only a bag this command wrote)" if overwrite else ")"))
  if not out.parent.is_dir():
    raise FileNotFoundError(f"--output {out}: its folder {out.parent} does not exist")
  return out


def complete_bag(input_bag: str | os.PathLike, output_bag: str | os.PathLike, completer: Any, *,
                 depth_topic: str | None = None, points_topic: str | None = None,
                 camera_info_topic: str | None = None, calib: str | os.PathLike | None = None,
                 namespace: str = "/pncnn", progress: bool | None = None, overwrite: bool = False,
                 log: Callable[[str], None] = print) -> dict[str, Any]:
  """What `python -m pncnn_jax.inference.rosbag` does (module doc), with a loaded `completer`
  (`pncnn_jax.inference.completer.Completer`: (H, W) metres -> depth [m], sigma [m]). Returns a summary dict.
  `progress`: a progress bar on stderr (None: only when stderr is a terminal; the command's --progress).

  Raises FileNotFoundError / FileExistsError / ValueError (one line naming the flag or the bag) before writing
  anything for a wrong bag, topic, calibration or output (`check_output`; `overwrite` replaces a bag this command
  wrote); OUT is removed if the conversion fails afterwards (BagWriteError for a write that fails, cli.Terminated for
  SIGTERM).
  """
  frames = _Frames(input_bag, depth_topic=depth_topic, points_topic=points_topic,
                   camera_info_topic=camera_info_topic, calib=calib)
  out = check_output(output_bag, overwrite)
  return frames.complete(out, completer, namespace=namespace.rstrip("/"), progress=progress, log=log)


class _Frames:
  """An input bag opened and checked: which topic, what camera, how to turn a message into sparse metres."""

  def __init__(self, input_bag, *, depth_topic, points_topic, camera_info_topic, calib):
    if (depth_topic is None) == (points_topic is None):
      raise ValueError("name one input: --depth_topic (depth images) or --points_topic (point clouds)")
    if depth_topic is not None and calib is not None:
      raise ValueError("--calib (LiDAR -> camera) applies to --points_topic, not to depth images")
    if points_topic is not None and camera_info_topic is None:
      raise ValueError("--points_topic needs --camera_info_topic: the camera the points are projected into")
    self.Reader, self.Writer, self.typestore = _rosbags()
    run_files.require_path(input_bag, "--input")
    self.bag = pathlib.Path(input_bag)
    if not self.bag.exists():
      raise FileNotFoundError(f"--input {self.bag}: no such bag")
    self.points = points_topic is not None
    self.topic = points_topic if self.points else depth_topic
    flag = "--points_topic" if self.points else "--depth_topic"
    self.T = None if calib is None else points_lib.read_transform(calib)
    with self._reader() as reader:
      self.conns = _topic(reader, self.bag, flag, self.topic, POINTCLOUD2 if self.points else IMAGE)
      self.count = sum(c.msgcount for c in self.conns)
      if camera_info_topic is None:  # a depth image's sibling camera_info, when the bag has it
        sibling = self.topic.rsplit("/", 1)[0] + "/camera_info"
        found = [c for c in reader.connections if c.topic == sibling and c.msgtype == CAMERA_INFO and c.msgcount]
        camera_info_topic = sibling if found else None
      self.info_topic = camera_info_topic
      self.infos = []
      if camera_info_topic is not None:
        info_conns = _topic(reader, self.bag, "--camera_info_topic", camera_info_topic, CAMERA_INFO)
        self.infos = _camera_infos(reader, info_conns, self.typestore)
        for _, info in self.infos:
          camera_of(info, f"--camera_info_topic {camera_info_topic}")  # checked once, before any work
      if self.points and self.T is None:
        first = self.typestore.deserialize_cdr(next(reader.messages(connections=self.conns))[2], POINTCLOUD2)
        cam_frame = self.infos[0][1].header.frame_id
        if first.header.frame_id != cam_frame:
          raise ValueError(f"--points_topic {self.topic} is in frame {first.header.frame_id!r}, the camera in "
                           f"{cam_frame!r}: pass --calib FILE with T_cam_from_lidar (/tf_static is not read)")

  @contextlib.contextmanager
  def _reader(self):
    """The input bag, open for reading (rosbags' Reader: it never writes to the bag)."""
    try:
      reader = self.Reader(self.bag)
      reader.open()
    except Exception as e:  # noqa: BLE001  (rosbags raises its own errors, sqlite3's and yaml's for a broken bag)
      raise ValueError(f"--input {self.bag}: not a readable rosbag2 bag ({first_line(e)})") from None
    try:
      yield reader
    finally:
      reader.close()

  def sparse(self, msg: Any, index: int) -> tuple[np.ndarray, Any, Any]:
    """A message -> (sparse (H, W) metres, the output header, its CameraInfo or None)."""
    where = f"{self.topic} message {index}"
    stamp = _stamp_ns(msg.header)
    info = _info_at(self.infos, stamp) if self.infos else None
    if not self.points:
      depth = depth_of(msg, where)
      if info is not None:  # the camera info is published with the completed depth: it must describe it
        input_contract.check_same_size(depth.shape, image_size_of(info), name=where,
                                       source=f"its camera info on {self.info_topic}")
      return depth, msg.header, info
    K, baseline, size = camera_of(info)
    T = baseline if self.T is None else baseline @ self.T
    xyz = pointcloud2_to_xyz(msg, where)
    input_contract.check_point_ranges(xyz, name=where, hint="PointCloud2 x, y, z are metres (REP 103)")
    depth = points_lib.project_points(xyz, K, T, size)
    header = dataclasses.replace(msg.header, frame_id=info.header.frame_id)
    return depth, header, info

  def complete(self, out: pathlib.Path, completer: Any, *, namespace: str, progress: bool | None,
               log: Callable[[str], None]) -> dict[str, Any]:
    from tqdm import tqdm  # pylint: disable=g-import-not-at-top

    ts = self.typestore
    Image = ts.types[IMAGE]
    second = "sigma" if completer.has_sigma else "confidence"
    fill = completer.fill_unsupported
    topics = {"depth": f"{namespace}/depth", second: f"{namespace}/{second}", "valid": f"{namespace}/valid",
              "camera_info": f"{namespace}/camera_info"}
    source = f"{self.topic} ({'PointCloud2' if self.points else 'Image'})" + (
        f" with camera info {self.info_topic}" if self.info_topic else " (no camera info)")
    log(f"reading {self.bag}: {self.count} frames on {source}")
    from pncnn_jax.inference import completer as completer_lib  # pylint: disable=g-import-not-at-top
    from pncnn_jax.inference import predict  # pylint: disable=g-import-not-at-top

    if out.exists():  # `check_output` let it through: a bag this command wrote, replaced (--overwrite)
      with _lock(out):
        shutil.rmtree(out)
      log(f"removed {out}, a bag this command wrote earlier (--overwrite)")
    record = {"command": "rosbag", "checkpoint": completer.name, "input": str(self.bag), "topic": self.topic,
              "model": predict.model_record(completer), "settings": {"fill_unsupported": fill,
                                                                     "namespace": namespace}}
    t0 = time.perf_counter()
    empty, far, n, invalid, pixels = [], 0, 0, 0, 0
    densities, outside = [], 0
    lock, created = None, False
    with cli.sigterm_raises():  # SIGTERM: clean up as for Ctrl-C (cli.Terminated; main exits 143)
      try:
        with self._reader() as reader, self.Writer(out, version=BAG_VERSION) as writer:
          created = True  # the Writer made OUT (it refuses an existing one): ours to remove on failure
          lock = _lock(out).acquire()
          run_files.write_writer(out, record)
          conns = {k: writer.add_connection(t, CAMERA_INFO if k == "camera_info" else IMAGE, typestore=ts)
                   for k, t in topics.items() if k != "camera_info" or self.info_topic}
          bar = tqdm(total=self.count, unit="frame", desc="completing", file=sys.stderr,
                     disable=not (cli.progress_enabled("auto") if progress is None else progress))
          for conn, bag_time, raw in reader.messages(connections=self.conns):
            msg = ts.deserialize_cdr(raw, conn.msgtype)
            sparse, header, info = self.sparse(msg, n)
            if (sparse > 0).any():
              with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = completer(sparse, name=f"{self.topic} message {n}")
              far += any(w.category.__name__ == "InputRangeWarning" for w in caught)
              densities.append(result.input_density)
              density_warning = [str(w.message) for w in caught if w.category.__name__ == "InputDensityWarning"]
              if density_warning and not outside:  # the first one, as one line; the summary counts the rest
                with tqdm.external_write_mode(file=sys.stderr):
                  log(f"warning: {density_warning[0]} (the first such frame; the summary counts them)")
              outside += bool(density_warning)
              depth, valid = result.depth, result.valid
              second_field = (result.sigma if completer.has_sigma else result.output_confidence if fill
                              else np.where(valid, result.output_confidence, np.float32(np.nan)))
            else:  # nothing to complete: REP 118's "no value"
              empty.append(n)
              depth = second_field = np.full(sparse.shape, np.nan, np.float32)
              valid = np.zeros(sparse.shape, bool)
            invalid += int((~valid).sum())
            pixels += valid.size
            for key, field in (("depth", depth), (second, second_field), ("valid", valid)):
              if key == "valid":
                data, encoding, step = np.where(field, np.uint8(255), np.uint8(0)), "mono8", field.shape[1]
              else:
                data, encoding, step = np.ascontiguousarray(field, "<f4"), "32FC1", 4 * field.shape[1]
              img = Image(header=header, height=field.shape[0], width=field.shape[1], encoding=encoding,
                          is_bigendian=0, step=step, data=np.frombuffer(data.tobytes(), np.uint8))
              writer.write(conns[key], bag_time, ts.serialize_cdr(img, IMAGE))
            if info is not None:
              writer.write(conns["camera_info"], bag_time,
                           ts.serialize_cdr(dataclasses.replace(info, header=header), CAMERA_INFO))
            n += 1
            bar.update()
          bar.close()
      except BaseException as e:
        if lock is not None:
          lock.release()
        if created:
          shutil.rmtree(out, ignore_errors=True)  # ours, new: nothing half-written stays under the user's name
        if isinstance(e, (sqlite3.Error, OSError)) and created:  # a full disk: sqlite3's "database or disk is full"
          raise BagWriteError(getattr(e, "errno", None) or 0,
                              f"cannot write {out}: {first_line(e)}; the partial bag was removed") from None
        raise
    lock.release()
    seconds = time.perf_counter() - t0
    unit = "metres" if completer.has_sigma else "unitless, not calibrated"
    info = f", {topics['camera_info']}" if self.info_topic else ""
    log(f"wrote {out}: {n} frames on {topics['depth']} (32FC1, metres), {topics[second]} (32FC1, {unit}), "
        f"{topics['valid']} (mono8){info} in {seconds:.1f} s ({seconds / max(n, 1):.2f} s/frame, the first frame's "
        "compilation included)")
    if invalid:
      log(f"note: {100 * invalid / max(pixels, 1):.0f}% of the pixels are not valid (no input support, or a negative "
          f"network depth): {'filled (--fill_unsupported)' if fill else 'NaN'} in {topics['depth']}, 0 in "
          f"{topics['valid']}")
    if empty:
      log(f"note: {len(empty)} frame(s) without any measurement written as NaN (messages {empty[:5]})")
    if far:
      log(f"note: {far} frame(s) hold measurements beyond the {completer.input_range_m[1]:g} m the model was "
          f"trained on; their depth and sigma near those points are extrapolations")
    density = None
    if densities:
      density = {"min": float(np.min(densities)), "median": float(np.median(densities)),
                 "max": float(np.max(densities))}
      text = completer_lib.density_text
      trained = getattr(completer, "trained_density", None)
      spread = (f"input density {text(density['median'])} %" if len(densities) == 1 else
                f"input density: median {text(density['median'])} % ({text(density['min'])}-{text(density['max'])} % "
                f"over {len(densities)} frames)")
      log(f"{spread}; " + (f"{outside} frame(s) outside the range this model was trained on, {trained}"
                           if trained is not None else "not checked (the model records no trained range)"))
    return {"frames": n, "empty": empty, "out_of_range": far, "topics": topics, "seconds": seconds,
            "invalid_fraction": invalid / max(pixels, 1), "input_density": density, "density_outside": outside}


def main(argv: list[str] | None = None) -> int:
  from pncnn_jax.inference import completer as completer_lib  # pylint: disable=g-import-not-at-top

  parser = cli.ArgumentParser(prog="python -m pncnn_jax.inference.rosbag",
                                   description=__doc__.splitlines()[0])
  parser.add_argument("--input", required=True, help="rosbag2 directory (or its .db3 / .mcap file); only read")
  parser.add_argument("--output", required=True, help="the new bag directory (must not exist)")
  parser.add_argument("--checkpoint", default=completer_lib.RECOMMENDED,
                      help=f"a shipped name ('synthetic:<name>') or any checkpoint predict takes (default "
                           f"{completer_lib.RECOMMENDED})")
  parser.add_argument("--depth_topic", default=None, help="sensor_msgs/Image depth topic (32FC1 m, 16UC1 mm)")
  parser.add_argument("--points_topic", default=None, help="sensor_msgs/PointCloud2 topic (with --camera_info_topic)")
  parser.add_argument("--camera_info_topic", default=None, help="sensor_msgs/CameraInfo topic")
  parser.add_argument("--calib", default=None,
                      help="YAML/JSON with T_cam_from_lidar: the clouds' frame -> the camera's optical frame")
  parser.add_argument("--namespace", default="/pncnn", help="prefix of the output topics (default /pncnn)")
  parser.add_argument("--fill_unsupported", action="store_true",
                      help="write the network's depth (clamped at 0) and sigma also where they are not valid (no "
                           "measurement within 8 px): every pixel a number; default NaN there")
  parser.add_argument("--progress", choices=cli.PROGRESS_MODES, default=None, help=cli.PROGRESS_HELP)
  parser.add_argument("--no_progress", action="store_true", help="deprecated: --progress off")
  parser.add_argument("--overwrite", action="store_true",
                      help="replace an OUT that this command wrote: a finished bag, or a partial one left by a killed "
                           "conversion (anything else is never replaced)")
  a = parser.parse_args(argv)
  if a.no_progress:
    cli.deprecated("--no_progress", "--progress off")
  progress = cli.progress_enabled(a.progress or ("off" if a.no_progress else "auto"))
  out = pathlib.Path(a.output)

  def convert():
    nonlocal out
    frames = _Frames(a.input, depth_topic=a.depth_topic, points_topic=a.points_topic,
                     camera_info_topic=a.camera_info_topic, calib=a.calib)
    out = check_output(a.output, a.overwrite)
    if not a.namespace.startswith("/") or a.namespace.rstrip("/") == "":
      raise ValueError(f"--namespace {a.namespace!r}: expected an absolute topic prefix such as /pncnn")
    completer = completer_lib.Completer.from_checkpoint(a.checkpoint, fill_unsupported=a.fill_unsupported)
    frames.complete(out, completer, namespace=a.namespace.rstrip("/"), progress=progress, log=print)

  return exit_status(convert, terminated=lambda: f"the partial bag {out} was removed",
                     interrupted=lambda: f"{out} was not written")


def exit_status(action: Callable[[], Any], *, terminated: Callable[[], str], interrupted: Callable[[], str]) -> int:
  """Runs a bag command's `action()`; its failures become one `error:` line on stderr and the command's exit status:
  1 for a bag that could not be written (`BagWriteError`: a full disk), 2 for bad input (ValueError,
  FileNotFoundError, FileExistsError, ImportError, another OSError), 143 for SIGTERM (`cli.Terminated`) and 130 for
  Ctrl-C, each with what happened to the output (`terminated()`, `interrupted()`); 0 when it returns."""
  try:
    action()
  except BagWriteError as e:
    print(f"error: {e.strerror}", file=sys.stderr)
    return 1
  except (ValueError, FileNotFoundError, FileExistsError, ImportError, OSError) as e:
    print(f"error: {first_line(e)}", file=sys.stderr)
    return 2
  except cli.Terminated:
    print(f"error: terminated (SIGTERM); {terminated()}", file=sys.stderr)
    return 128 + signal.SIGTERM
  except KeyboardInterrupt:
    print(f"error: interrupted; {interrupted()}", file=sys.stderr)
    return 130
  return 0


if __name__ == "__main__":
  sys.exit(main())
