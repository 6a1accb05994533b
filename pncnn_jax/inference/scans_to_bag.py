r"""KITTI-style LiDAR scans and their calibration -> a ROS 2 bag that the bag completion command reads.

  pncnn-scans-to-bag --scans SCAN_OR_FOLDER --calib DATE_FOLDER --output BAG [--camera 02]
      [--timestamps auto|none|FILE] [--rate 10] [--points_topic T] [--camera_info_topic T] [--overwrite]
      [--progress auto|on|off]
  python -m pncnn_jax.inference.scans_to_bag ...        (the same command)

and then (the command prints it, with BAG filled in)

  pncnn-rosbag --input BAG --output COMPLETED --points_topic /kitti/velo/pointcloud \
      --camera_info_topic /kitti/camera_color_left/camera_info --calib BAG/lidar_to_camera.yaml

Needs the `ros` extra (`pip install 'pncnn_jax[ros]'`: the pure-Python `rosbags` package; no ROS installation), as
the bag command does. No network runs: it only converts.

Inputs (KITTI raw, as in its `<date>/<drive>_sync/velodyne_points/data/*.bin` and `<date>/calib_*.txt`):
  --scans       a KITTI Velodyne `.bin` scan (float32 records x, y, z, reflectance, little-endian, metres in the
                LiDAR frame) or a folder of them (its *.bin files, in name order)
  --calib       the date folder (or either file in it): calib_cam_to_cam.txt (P_rect_0X, R_rect_00, S_rect_0X)
                and calib_velo_to_cam.txt (R, T), read by `pncnn_jax.data.points.read_kitti_camera`
  --camera      02 (left colour, default) or 03 (right colour)
  --timestamps  auto (default): the KITTI file `velodyne_points/timestamps.txt` beside the scans' `data/` folder
                when there is one, else a fixed rate; FILE: that file; none: the fixed rate. A KITTI timestamps file
                has one 'YYYY-MM-DD HH:MM:SS.fffffffff' line per frame; scan NNNNNNNNNN.bin takes line NNNNNNNNNN
                (counted from 0), read as UTC.
  --rate        the fixed rate [Hz] (default 10, a Velodyne's rotation rate): scan NNNNNNNNNN.bin is stamped
                NNNNNNNNNN / rate seconds (its position in name order when the names are not frame numbers).

BAG is a new rosbag2 directory (sqlite3 storage, rosbag2 format version 9, as the bag command writes) holding, per
scan, stamped with the scan's time and written at it:

  /kitti/velo/pointcloud                sensor_msgs/PointCloud2 in frame velo_link: the scan's records as stored
                                        (x, y, z, intensity float32, 16 bytes a point, one row; intensity = KITTI's
                                        reflectance), so the bag's points are the .bin's float32 values
  /kitti/camera_color_left/camera_info  sensor_msgs/CameraInfo of the camera (camera 03: .../camera_color_right/...,
                                        frame camera_color_left / camera_color_right): the rectified camera of the
                                        KITTI images, P = P_rect_0X (its 4th column: the stereo baseline), K =
                                        P[:, :3], R = I, D = 0 (plumb_bob), height x width = S_rect_0X

(the topic and frame names of kitti2bag; --points_topic and --camera_info_topic rename the topics), and beside the
bag's files:

  BAG/lidar_to_camera.yaml  T_cam_from_lidar = R_rect_00 Tr_velo_to_cam (4x4): the LiDAR frame -> the rectified
                            frame that P projects from, what `pncnn-rosbag --calib` takes (it reads no /tf_static:
                            pncnn_jax.inference.rosbag). P's baseline column then moves the points into camera 0X,
                            so the bag command's sparse depth is `predict --points SCAN --calib DATE_FOLDER`'s
                            exactly. The file holds no K: a calibration for `predict --calib` needs K with that
                            baseline folded into T_cam_from_lidar (read_kitti_calibration), so this file is refused
                            there rather than projecting 6 cm off.
  BAG/pncnn_writer.json     this command's record (scans, calibration, camera, frames): what --overwrite checks.

No /tf_static is written: the bag command takes the extrinsics from --calib, never from tf.

Errors are one line on stderr, exit status 2, and write nothing: a missing calibration file (or one without the
camera, or a row), a missing scan or a folder without .bin files, a .bin whose size is not a multiple of 16 bytes
(checked for every scan before anything is written), a scan whose ranges are not metres (the input contract's
units check), a timestamps file with too few lines or a line that is not a time, an existing BAG. An existing BAG
is replaced only with --overwrite, and only when it is a bag this command wrote (its pncnn_writer.json says so);
anything else is never replaced.
The bag is written into a temporary folder beside BAG (`.BAG.pncnn-tmp<pid>`) and renamed to BAG when complete:
BAG never names a half-written bag. An error, Ctrl-C or SIGTERM removes the temporary folder (exit status 1, 130,
143); a run killed with SIGKILL leaves it, and the next run removes it.
"""

from __future__ import annotations

import argparse
import calendar
import datetime
import os
import pathlib
import re
import shutil
import sys
from typing import Any, Callable

import numpy as np

from pncnn_jax.data import points as points_lib
from pncnn_jax.inference import rosbag
from pncnn_jax.runtime import cli, run_files
from pncnn_jax.runtime.cli import first_line

RECORD_BYTES = 16  # a KITTI Velodyne record: float32 x, y, z, reflectance
TIMESTAMPS = "timestamps.txt"  # KITTI raw: <drive>/velodyne_points/timestamps.txt beside data/
DEFAULT_RATE_HZ = 10.0  # a Velodyne HDL-64E at KITTI's 600 rpm
POINTS_TOPIC = "/kitti/velo/pointcloud"
LIDAR_FRAME = "velo_link"
CAMERA_FRAMES = {"02": "camera_color_left", "03": "camera_color_right"}  # kitti2bag's names
CALIB_FILE = "lidar_to_camera.yaml"  # in BAG: what `pncnn-rosbag --calib` takes
COMMAND = "scans_to_bag"  # the `command` of BAG/pncnn_writer.json
TMP_MARK = ".pncnn-tmp"
TIME_LINE = re.compile(r"^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?$")


def camera_info_topic(camera: str) -> str:
  """The default CameraInfo topic of a KITTI camera ('02' -> /kitti/camera_color_left/camera_info)."""
  return f"/kitti/{CAMERA_FRAMES[camera]}/camera_info"


def scan_files(path: str | os.PathLike) -> list[pathlib.Path]:
  """The scans: the .bin file `path`, or the .bin files of the folder `path` in name order; each of a whole number of
  16-byte records. One-line errors naming the file (FileNotFoundError / ValueError)."""
  run_files.require_path(path, "--scans")
  p = pathlib.Path(path)
  if p.is_dir():
    files = sorted(f for f in p.iterdir() if f.suffix == ".bin" and f.is_file())
    if not files:
      raise FileNotFoundError(f"--scans {p}: no .bin scans in this folder")
  elif p.is_file():
    if p.suffix != ".bin":
      raise ValueError(f"--scans {p}: expected a KITTI Velodyne .bin scan (or a folder of them)")
    files = [p]
  else:
    raise FileNotFoundError(f"--scans {p}: no such file or folder")
  for f in files:
    size = f.stat().st_size
    if size % RECORD_BYTES:
      raise ValueError(f"--scans {f}: {size} bytes is not a multiple of {RECORD_BYTES} (a KITTI scan is float32 "
                       "x, y, z, reflectance records of 16 bytes); a truncated or foreign file")
  return files


def parse_time_ns(line: str, where: str) -> int:
  """'2011-09-26 13:02:25.964389445' (KITTI's timestamps) -> nanoseconds since 1970 UTC, exactly."""
  m = TIME_LINE.match(line.strip())
  if not m:
    raise ValueError(f"{where}: {line.strip()[:40]!r} is not a time 'YYYY-MM-DD HH:MM:SS.fffffffff'")
  y, mo, d, h, mi, s = (int(v) for v in m.groups()[:6])
  try:
    datetime.datetime(y, mo, d, h, mi, min(s, 59))  # a real date and time (a leap second's 60 passes)
  except ValueError:
    raise ValueError(f"{where}: {line.strip()[:40]!r} is not a valid date and time") from None
  seconds = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
  return seconds * 1_000_000_000 + int((m.group(7) or "0").ljust(9, "0"))


def frame_numbers(files: list[pathlib.Path]) -> tuple[list[int], bool]:
  """(each scan's frame number, whether they come from the names): KITTI's 0000000005.bin is frame 5; names that
  are not all numbers give the position in name order instead."""
  if all(f.stem.isdigit() for f in files):
    return [int(f.stem) for f in files], True
  return list(range(len(files))), False


def stamps_ns(files: list[pathlib.Path], timestamps: str, rate_hz: float) -> tuple[list[int], str]:
  """(each scan's stamp [ns since 1970], how they were found, for the summary line): the module doc's
  --timestamps and --rate."""
  if not (np.isfinite(rate_hz) and rate_hz > 0):
    raise ValueError(f"--rate {rate_hz:g}: must be a frequency > 0 in Hz")
  numbers, named = frame_numbers(files)
  source = None
  if timestamps == "auto":
    candidate = files[0].parent.parent / TIMESTAMPS
    source = candidate if candidate.is_file() else None
  elif timestamps != "none":
    run_files.require_path(timestamps, "--timestamps")
    source = pathlib.Path(timestamps)
    if not source.is_file():
      raise FileNotFoundError(f"--timestamps {source}: no such file (auto: the KITTI file beside the scans' folder; "
                              "none: the fixed --rate)")
  if source is None:
    how = "the frame numbers of the names" if named else "the scans' order"
    return ([round(n * 1e9 / rate_hz) for n in numbers],
            f"at {rate_hz:g} Hz from {how} ({'no timestamps file' if timestamps == 'auto' else '--timestamps none'})")
  if not named:
    raise ValueError(f"--timestamps {source}: the scans' names are not frame numbers (0000000005.bin), so no line "
                     "of it belongs to a scan; pass --timestamps none for the fixed --rate")
  lines = [x for x in source.read_text(errors="replace").splitlines() if x.strip()]
  if max(numbers) >= len(lines):
    raise ValueError(f"--timestamps {source}: {len(lines)} lines, but the scans go up to frame {max(numbers)} "
                     f"({files[numbers.index(max(numbers))].name})")
  return ([parse_time_ns(lines[n], f"--timestamps {source} line {n + 1}") for n in numbers],
          f"from {source}")


def _ros_time(ts: Any, ns: int) -> Any:
  return ts.types["builtin_interfaces/msg/Time"](sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def pointcloud2(ts: Any, records: np.ndarray, stamp_ns: int, frame_id: str = LIDAR_FRAME) -> Any:
  """sensor_msgs/PointCloud2 of (N, 4) float32 KITTI records: fields x, y, z, intensity (FLOAT32 at 0, 4, 8, 12),
  16 bytes a point, little-endian, one row of N; `data` is the records' bytes."""
  rec = np.ascontiguousarray(records, "<f4")
  Field = ts.types["sensor_msgs/msg/PointField"]
  fields = [Field(name=n, offset=4 * i, datatype=7, count=1) for i, n in enumerate(("x", "y", "z", "intensity"))]
  header = ts.types["std_msgs/msg/Header"](stamp=_ros_time(ts, stamp_ns), frame_id=frame_id)
  return ts.types[rosbag.POINTCLOUD2](
      header=header, height=1, width=len(rec), fields=fields, is_bigendian=False, point_step=RECORD_BYTES,
      row_step=RECORD_BYTES * len(rec), data=rec.view(np.uint8).reshape(-1),
      is_dense=bool(np.isfinite(rec[:, :3]).all()))


def camera_info(ts: Any, cam: points_lib.KittiCamera, stamp_ns: int, frame_id: str) -> Any:
  """sensor_msgs/CameraInfo of a rectified KITTI camera: P = P_rect_0X, K = P[:, :3], R = I, D = 0 (the module doc)."""
  h, w = cam.image_size
  header = ts.types["std_msgs/msg/Header"](stamp=_ros_time(ts, stamp_ns), frame_id=frame_id)
  roi = ts.types["sensor_msgs/msg/RegionOfInterest"](x_offset=0, y_offset=0, height=0, width=0, do_rectify=False)
  return ts.types[rosbag.CAMERA_INFO](
      header=header, height=h, width=w, distortion_model="plumb_bob", d=np.zeros(5), k=cam.P_rect[:, :3].ravel(),
      r=np.eye(3).ravel(), p=cam.P_rect.ravel(), binning_x=0, binning_y=0, roi=roi)


def calibration_yaml(cam: points_lib.KittiCamera, calib: pathlib.Path, camera: str) -> str:
  """BAG/lidar_to_camera.yaml: T_cam_from_lidar = R_rect_00 Tr_velo_to_cam, each float as Python writes it (so that
  it reads back exactly), with a comment saying what it is."""
  import yaml  # pylint: disable=g-import-not-at-top  (PyYAML: a dependency of flax)

  body = yaml.safe_dump({"T_cam_from_lidar": cam.T_rect_from_lidar.tolist()}, default_flow_style=None, width=200)
  return (f"# LiDAR ({LIDAR_FRAME}) -> the rectified camera frame that camera {camera}'s CameraInfo P projects "
          f"from:\n# R_rect_00 @ Tr_velo_to_cam of {calib} (pncnn-scans-to-bag). For pncnn-rosbag --calib; K and "
          "the image size\n# come from the CameraInfo, whose P adds the stereo baseline.\n" + body)


def check_output(output: str | os.PathLike, overwrite: bool = False) -> pathlib.Path:
  """BAG must not exist, unless `overwrite` and it is a bag this command wrote (its pncnn_writer.json). One-line
  FileExistsError otherwise, naming BAG and the way out. Reads only."""
  run_files.require_path(output, "--output")
  out = pathlib.Path(output)
  if not (out.exists() or out.is_symlink()):
    if not out.parent.is_dir():
      raise FileNotFoundError(f"--output {out}: its folder {out.parent} does not exist")
    return out
  record = run_files.read_writer(out) if out.is_dir() and not out.is_symlink() else None
  ours = record is not None and record.get("command") == COMMAND
  if ours and overwrite:
    return out
  if ours:
    raise FileExistsError(f"--output {out} already exists (a bag this command wrote from {record.get('scans')}); pass "
                          "--overwrite to replace it, or name a new bag directory")
  raise FileExistsError(f"--output {out} already exists and is not a bag this command wrote (no {run_files.WRITER_FILE}"
                        " of pncnn-scans-to-bag in it); name a new bag directory (it is never replaced)")


def _remove_stale_temporaries(out: pathlib.Path) -> None:
  """Removes the temporary folders of runs into `out` that were killed with SIGKILL (their process is gone)."""
  for tmp in out.parent.glob(f".{out.name}{TMP_MARK}*"):
    pid = tmp.name[len(f".{out.name}{TMP_MARK}"):]
    if not pid.isdigit() or not tmp.is_dir() or tmp.is_symlink():
      continue
    try:
      os.kill(int(pid), 0)
      continue  # its writer still runs
    except ProcessLookupError:
      shutil.rmtree(tmp, ignore_errors=True)
    except PermissionError:
      continue  # another user's process


def convert(scans: str | os.PathLike, calib: str | os.PathLike, output: str | os.PathLike, *, camera: str = "02",
            timestamps: str = "auto", rate_hz: float = DEFAULT_RATE_HZ, points_topic: str = POINTS_TOPIC,
            info_topic: str | None = None, overwrite: bool = False, progress: bool | None = None,
            log: Callable[[str], None] = print) -> dict[str, Any]:
  """What the command does (module doc); returns a summary {frames, points, stamps_ns, topics, calib_file, bag}.

  Raises FileNotFoundError / FileExistsError / ValueError (one line) before writing anything for a bad scan,
  calibration, timestamps file or output; a scan that fails later (its units) removes the temporary bag and
  raises; so do Ctrl-C and SIGTERM (cli.Terminated).
  """
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top

  _, Writer, ts = rosbag._rosbags()  # pylint: disable=protected-access
  for topic, flag in ((points_topic, "--points_topic"), (info_topic, "--camera_info_topic")):
    if topic is not None and (not topic.startswith("/") or topic.endswith("/") or " " in topic):
      raise ValueError(f"{flag} {topic!r}: expected an absolute topic name such as /kitti/velo/pointcloud")
  if camera not in CAMERA_FRAMES:
    raise ValueError(f"--camera {camera!r}: KITTI raw has the colour cameras {', '.join(CAMERA_FRAMES)}")
  info_topic = info_topic or camera_info_topic(camera)
  if info_topic == points_topic:
    raise ValueError(f"--points_topic and --camera_info_topic are both {info_topic}: name two topics")
  files = scan_files(scans)
  run_files.require_path(calib, "--calib")
  calib_path = pathlib.Path(calib)
  if not calib_path.exists():
    raise FileNotFoundError(f"--calib {calib_path}: no such file or folder (a KITTI date folder with "
                            f"{points_lib.CAM_TO_CAM} and {points_lib.VELO_TO_CAM})")
  if not (calib_path.is_dir() or calib_path.name in (points_lib.CAM_TO_CAM, points_lib.VELO_TO_CAM)):
    raise ValueError(f"--calib {calib_path}: expected a KITTI date folder (or its {points_lib.CAM_TO_CAM} or "
                     f"{points_lib.VELO_TO_CAM})")
  cam = points_lib.read_kitti_camera(calib_path, camera)
  stamps, how = stamps_ns(files, timestamps, rate_hz)
  out = check_output(output, overwrite)
  _remove_stale_temporaries(out)
  tmp_root = out.parent / f".{out.name}{TMP_MARK}{os.getpid()}"
  bag = tmp_root / out.name  # rosbags names the .db3 after its folder: the final name from the start
  frame = CAMERA_FRAMES[camera]
  total = 0
  bar = tqdm(total=len(files), unit="scan", desc="writing", file=sys.stderr,
             disable=not (cli.progress_enabled("auto") if progress is None else progress))
  with cli.sigterm_raises():  # SIGTERM: clean up as for Ctrl-C (cli.Terminated)
    try:
      tmp_root.mkdir()
      with Writer(bag, version=rosbag.BAG_VERSION) as writer:
        c_info = writer.add_connection(info_topic, rosbag.CAMERA_INFO, typestore=ts)
        c_points = writer.add_connection(points_topic, rosbag.POINTCLOUD2, typestore=ts)
        for f, stamp in zip(files, stamps):
          records = points_lib.read_points(f)  # the units check: a scan in millimetres is one line
          total += len(records)
          writer.write(c_info, stamp, ts.serialize_cdr(camera_info(ts, cam, stamp, frame), rosbag.CAMERA_INFO))
          writer.write(c_points, stamp, ts.serialize_cdr(pointcloud2(ts, records, stamp), rosbag.POINTCLOUD2))
          bar.update()
      bar.close()
      (bag / CALIB_FILE).write_text(calibration_yaml(cam, calib_path, camera))
      run_files.write_writer(bag, {"command": COMMAND, "scans": str(scans), "calib": str(calib_path),
                                   "camera": camera, "frames": len(files), "points_topic": points_topic,
                                   "camera_info_topic": info_topic})
      if out.exists() or out.is_symlink():  # --overwrite, checked above: a bag this command wrote
        check_output(out, overwrite=True)  # still ours (another run may have written it meanwhile)
        os.rename(out, tmp_root / "replaced")
      os.rename(bag, out)
    except BaseException as e:
      bar.close()
      shutil.rmtree(tmp_root, ignore_errors=True)
      if isinstance(e, OSError) and not isinstance(e, (FileNotFoundError, FileExistsError)):
        raise rosbag.BagWriteError(e.errno or 0, f"cannot write {out}: {first_line(e)}; nothing was written") from None
      raise
  shutil.rmtree(tmp_root, ignore_errors=True)
  log(f"wrote {out}: {len(files)} scan(s), {total} points, on {points_topic} (PointCloud2, frame {LIDAR_FRAME}) and "
      f"camera {camera}'s CameraInfo ({cam.image_size[0]}x{cam.image_size[1]}, P = P_rect_{camera}) on {info_topic} "
      f"(frame {frame}); stamps {how}; LiDAR -> camera in {out / CALIB_FILE}")
  log(f"complete it with: pncnn-rosbag --input {out} --output COMPLETED --points_topic {points_topic} "
      f"--camera_info_topic {info_topic} --calib {out / CALIB_FILE}")
  return {"bag": out, "frames": len(files), "points": total, "stamps_ns": stamps,
          "topics": {"points": points_topic, "camera_info": info_topic}, "calib_file": out / CALIB_FILE}



def main(argv: list[str] | None = None) -> int:
  parser = cli.ArgumentParser(prog="pncnn-scans-to-bag", description=__doc__.splitlines()[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog="python -m pncnn_jax.inference.scans_to_bag is the same command; its module doc "
                                     "(and docs/deploy/sensors.md) says what the bag holds.")
  parser.add_argument("--scans", required=True, help="a KITTI Velodyne .bin scan or a folder of them")
  parser.add_argument("--calib", required=True,
                      help=f"the KITTI date folder ({points_lib.CAM_TO_CAM}, {points_lib.VELO_TO_CAM}) or either file")
  parser.add_argument("--output", required=True, help="the new bag directory (must not exist)")
  parser.add_argument("--camera", default="02", help="the KITTI camera: 02 (left colour, default) or 03 (right)")
  parser.add_argument("--timestamps", default="auto",
                      help=f"auto (default: velodyne_points/{TIMESTAMPS} beside the scans' folder when present, else "
                           "--rate), none (--rate) or a KITTI timestamps file")
  parser.add_argument("--rate", type=float, default=DEFAULT_RATE_HZ,
                      help="Hz, the fixed rate without a timestamps file: frame N is stamped N / rate s (default 10)")
  parser.add_argument("--points_topic", default=POINTS_TOPIC, help=f"the PointCloud2 topic (default {POINTS_TOPIC})")
  parser.add_argument("--camera_info_topic", default=None,
                      help="the CameraInfo topic (default /kitti/camera_color_left/camera_info for 02, "
                           "/kitti/camera_color_right/camera_info for 03)")
  parser.add_argument("--overwrite", action="store_true",
                      help="replace an --output that this command wrote (anything else is never replaced)")
  parser.add_argument("--progress", choices=cli.PROGRESS_MODES, default="auto", help=cli.PROGRESS_HELP)
  a = parser.parse_args(argv)
  return rosbag.exit_status(
      lambda: convert(a.scans, a.calib, a.output, camera=a.camera, timestamps=a.timestamps, rate_hz=a.rate,
                      points_topic=a.points_topic, info_topic=a.camera_info_topic, overwrite=a.overwrite,
                      progress=cli.progress_enabled(a.progress)),
      terminated=lambda: f"{a.output} was not written", interrupted=lambda: f"{a.output} was not written")


if __name__ == "__main__":
  sys.exit(main())
