//! `lmdbio convert` against the real thing: Caffe's own `convert_imageset`
//! (record for record), liblmdb and `mdb_dump` (reading the output), and
//! the stock `caffe` binary (training on it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lmdb::{Cursor, Environment, EnvironmentFlags, Transaction};
use lmdbio_testkit::images::{sample_rgb, write_class_folders, write_image};
use lmdbio_testkit::TempDir;

type Records = Vec<(Vec<u8>, Vec<u8>)>;

fn lmdbio(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lmdbio"))
        .arg("convert")
        .args(args)
        // The HDF5 tests write their files in this process, and libhdf5
        // opens them without close-on-exec: a child that another test
        // thread spawns meanwhile inherits the descriptor and its lock, and
        // the converter's own open then failed with "unable to lock file"
        // (seen once in CI-like runs). Reading needs no lock.
        .env("HDF5_USE_FILE_LOCKING", "FALSE")
        .output()
        .expect("run lmdbio")
}

fn lmdbio_ok(args: &[&str]) -> Output {
    let out = lmdbio(args);
    assert!(
        out.status.success(),
        "lmdbio convert {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn convert_imageset(flags: &[&str], root: &Path, list: &Path, out: &Path) {
    let mut root_arg = root.as_os_str().to_owned();
    root_arg.push("/");
    let result = Command::new("convert_imageset")
        .args(flags)
        .arg(root_arg)
        .arg(list)
        .arg(out)
        .env("GLOG_minloglevel", "1")
        .output()
        .expect("run convert_imageset (Caffe)");
    assert!(
        result.status.success(),
        "convert_imageset {flags:?} failed: {}",
        String::from_utf8_lossy(&result.stderr)
    );
}

/// Every record liblmdb's cursor returns, in order.
fn read_db(path: &Path) -> Records {
    let env = Environment::new()
        .set_flags(EnvironmentFlags::READ_ONLY)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let db = env.open_db(None).unwrap();
    let txn = env.begin_ro_txn().unwrap();
    let mut cursor = txn.open_ro_cursor(db).unwrap();
    cursor
        .iter_start()
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The fields of a serialized Datum.
#[derive(Debug, Default)]
struct Datum {
    channels: Option<u64>,
    height: Option<u64>,
    width: Option<u64>,
    data: Option<Vec<u8>>,
    label: Option<i32>,
    float_data: Vec<f32>,
    encoded: Option<bool>,
}

fn parse_datum(mut b: &[u8]) -> Datum {
    fn varint(b: &mut &[u8]) -> u64 {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = b[0];
            *b = &b[1..];
            v |= ((byte & 0x7f) as u64) << shift;
            if byte < 0x80 {
                break;
            }
        }
        v
    }
    let mut d = Datum::default();
    while !b.is_empty() {
        let tag = varint(&mut b);
        match (tag >> 3, tag & 7) {
            (1, 0) => d.channels = Some(varint(&mut b)),
            (2, 0) => d.height = Some(varint(&mut b)),
            (3, 0) => d.width = Some(varint(&mut b)),
            (4, 2) => {
                let n = varint(&mut b) as usize;
                d.data = Some(b[..n].to_vec());
                b = &b[n..];
            }
            (5, 0) => d.label = Some(varint(&mut b) as i64 as i32),
            (6, 5) => {
                d.float_data
                    .push(f32::from_le_bytes(b[..4].try_into().unwrap()));
                b = &b[4..];
            }
            (7, 0) => d.encoded = Some(varint(&mut b) != 0),
            other => panic!("unexpected Datum field {other:?}"),
        }
    }
    d
}

/// Planar BGR (or grey) pixels of an image file as OpenCV reads it,
/// decoded here with the `image` crate for lossless formats.
fn planar_bgr(path: &Path) -> (u32, u32, Vec<u8>) {
    let img = image::open(path).unwrap().to_rgb8();
    let (w, h) = img.dimensions();
    let plane = (w * h) as usize;
    let mut out = vec![0u8; plane * 3];
    for (i, px) in img.pixels().enumerate() {
        out[i] = px[2];
        out[plane + i] = px[1];
        out[2 * plane + i] = px[0];
    }
    (w, h, out)
}

fn write_list(path: &Path, lines: &[(String, i32)]) {
    let text: String = lines.iter().map(|(p, l)| format!("{p} {l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// A small mixed set: colour and grey PNG, RGBA PNG, BMP, PPM, odd sizes,
/// plus two entries convert_imageset skips (a missing file, a PNG that is
/// not one), so the line-number gaps are compared too.
fn mixed_lossless_set(root: &Path) -> Vec<(String, i32)> {
    let mut lines = Vec::new();
    let mut add = |name: String, label: i32| lines.push((name, label));
    for i in 0..6u32 {
        let (w, h) = (17 + 5 * i, 13 + 3 * i);
        let rgb = sample_rgb(i as u64, w, h);
        let name = format!("c{i}.{}", ["png", "bmp", "ppm"][i as usize % 3]);
        write_image(&root.join(&name), &rgb, w, h, 3);
        add(name, i as i32 % 3);
    }
    let grey: Vec<u8> = sample_rgb(40, 21, 19).iter().step_by(3).copied().collect();
    write_image(&root.join("grey.png"), &grey, 21, 19, 1);
    add("grey.png".into(), 7);
    let rgba: Vec<u8> = sample_rgb(41, 12, 12)
        .chunks(3)
        .flat_map(|p| [p[0], p[1], p[2], 99])
        .collect();
    image::save_buffer(
        root.join("alpha.png"),
        &rgba,
        12,
        12,
        image::ExtendedColorType::Rgba8,
    )
    .unwrap();
    add("alpha.png".into(), 1);
    add("missing.png".into(), 2);
    std::fs::write(root.join("broken.png"), b"\x89PNG\r\n\x1a\nnot really").unwrap();
    add("broken.png".into(), 0);
    add("with space.png".into(), 5);
    let rgb = sample_rgb(42, 30, 30);
    write_image(&root.join("with space.png"), &rgb, 30, 30, 3);
    // Truncated files both decoders refuse (a truncated JPEG that still
    // has its first scan is accepted by both, with different filler).
    let png = std::fs::read(root.join("c0.png")).unwrap();
    std::fs::write(root.join("cut.png"), &png[..png.len() / 2]).unwrap();
    add("cut.png".into(), 0);
    let jpeg_path = root.join("whole.jpg");
    write_image(&jpeg_path, &sample_rgb(43, 40, 40), 40, 40, 3);
    let jpeg = std::fs::read(&jpeg_path).unwrap();
    std::fs::write(root.join("cut.jpg"), &jpeg[..300]).unwrap();
    add("cut.jpg".into(), 0);
    // 16-bit samples (OpenCV keeps the high byte) and grey with alpha.
    // Low byte 0x90: truncating and rounding to 8 bits disagree.
    let bytes16: Vec<u8> = sample_rgb(44, 11, 9)
        .iter()
        .flat_map(|&v| ((v as u16) << 8 | 0x90).to_ne_bytes())
        .collect();
    image::save_buffer(
        root.join("rgb16.png"),
        &bytes16,
        11,
        9,
        image::ExtendedColorType::Rgb16,
    )
    .unwrap();
    add("rgb16.png".into(), 1);
    let grey16: Vec<u8> = bytes16[..11 * 9 * 2].to_vec();
    image::save_buffer(
        root.join("grey16.png"),
        &grey16,
        11,
        9,
        image::ExtendedColorType::L16,
    )
    .unwrap();
    add("grey16.png".into(), 2);
    let grey_alpha: Vec<u8> = sample_rgb(45, 10, 10)[..200].to_vec();
    image::save_buffer(
        root.join("greyalpha.png"),
        &grey_alpha,
        10,
        10,
        image::ExtendedColorType::La8,
    )
    .unwrap();
    add("greyalpha.png".into(), 3);
    // Grey BMP (8-bit palette) and PGM.
    let grey: Vec<u8> = sample_rgb(46, 13, 7).iter().step_by(3).copied().collect();
    write_image(&root.join("grey.bmp"), &grey, 13, 7, 1);
    add("grey.bmp".into(), 4);
    write_image(&root.join("grey.pgm"), &grey, 13, 7, 1);
    add("grey.pgm".into(), 5);
    lines
}

#[test]
fn records_are_byte_identical_to_convert_imageset() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("images");
    std::fs::create_dir(&root).unwrap();
    let list = dir.path().join("list.txt");
    write_list(&list, &mixed_lossless_set(&root));
    let variants: &[(&[&str], &[&str])] = &[
        (&[], &[]),
        (&["--encoded"], &["--encoded"]),
        (&["--gray"], &["--gray"]),
        (&["--gray", "--encoded"], &["--gray", "--encoded"]),
        (
            &["--resize_width=23", "--resize_height=31"],
            &["--resize", "23x31"],
        ),
        (
            &["--gray", "--resize_width=64", "--resize_height=40"],
            &["--gray", "--resize", "64x40"],
        ),
        // c5.ppm is 42×28: an exact halving, OpenCV's INTER_AREA shortcut.
        (
            &["--resize_width=21", "--resize_height=14"],
            &["--resize", "21x14"],
        ),
    ];
    for (n, (theirs_flags, our_flags)) in variants.iter().enumerate() {
        let theirs = dir.path().join(format!("theirs{n}"));
        let ours = dir.path().join(format!("ours{n}"));
        convert_imageset(theirs_flags, &root, &list, &theirs);
        let mut args: Vec<&str> = our_flags.to_vec();
        args.extend(["--threads", "2"]);
        let (r, l, o) = (
            root.to_str().unwrap(),
            list.to_str().unwrap(),
            ours.to_str().unwrap(),
        );
        args.extend([r, l, o]);
        let out = lmdbio_ok(&args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("(4 skipped)"), "{stdout}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("missing.png") && stderr.contains("broken.png"),
            "skips must name the files: {stderr}"
        );
        let (t, o) = (read_db(&theirs), read_db(&ours));
        assert_eq!(
            t.len(),
            14,
            "{our_flags:?}: convert_imageset wrote {}",
            t.len()
        );
        assert_eq!(
            t.len(),
            o.len(),
            "{our_flags:?}: record counts differ: {stderr}"
        );
        for ((tk, tv), (ok, ov)) in t.iter().zip(&o) {
            let key = String::from_utf8_lossy(tk);
            assert_eq!(tk, ok, "{our_flags:?}: keys differ");
            assert!(
                tv == ov,
                "{our_flags:?}: record {key} differs from convert_imageset's"
            );
        }
        assert!(o.iter().all(|(k, _)| !k.ends_with(b"missing.png")));
        assert!(o.iter().any(|(k, _)| k == b"00000010_with space.png"));
    }
}

/// Max and mean absolute difference of two equal-length byte strings.
fn pixel_difference(a: &[u8], b: &[u8]) -> (u8, f64) {
    assert_eq!(a.len(), b.len());
    let (mut max, mut sum) = (0u8, 0u64);
    for (x, y) in a.iter().zip(b) {
        let d = x.abs_diff(*y);
        max = max.max(d);
        sum += d as u64;
    }
    (max, sum as f64 / a.len().max(1) as f64)
}

#[test]
fn jpeg_pixels_within_decoder_tolerance() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("jpegs");
    let mut lines = write_class_folders(&root, 2, 6, 48, "jpg", 7);
    // A 40×24 JPEG tagged "rotate 90° clockwise" (EXIF orientation 6):
    // imread turns it upright, so the record must be 24 wide, 40 high.
    let plain = root.join("plain.jpg");
    write_image(&plain, &sample_rgb(8, 40, 24), 40, 24, 3);
    let jpeg = std::fs::read(&plain).unwrap();
    let mut exif = vec![0xFF, 0xE1, 0, 34];
    exif.extend_from_slice(b"Exif\0\0II\x2a\0\x08\0\0\0");
    exif.extend_from_slice(&[1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0]);
    let rotated = [&jpeg[..2], &exif, &jpeg[2..]].concat();
    std::fs::write(root.join("rotated.jpg"), rotated).unwrap();
    lines.push(("rotated.jpg".into(), 1));
    let list = dir.path().join("list.txt");
    write_list(&list, &lines);
    for (flags, our_flags, max_allowed) in [
        (&[][..], &[][..], 3u8),
        (&["--gray"][..], &["--gray"][..], 2),
        (
            &["--resize_width=32", "--resize_height=32"][..],
            &["--resize", "32x32"][..],
            3,
        ),
    ] {
        let theirs = dir
            .path()
            .join(format!("theirs{}", flags.len() + our_flags.len()));
        let ours = dir
            .path()
            .join(format!("ours{}", flags.len() + our_flags.len()));
        convert_imageset(flags, &root, &list, &theirs);
        let mut args = our_flags.to_vec();
        args.extend([
            root.to_str().unwrap(),
            list.to_str().unwrap(),
            ours.to_str().unwrap(),
        ]);
        lmdbio_ok(&args);
        let (t, o) = (read_db(&theirs), read_db(&ours));
        assert_eq!(t.len(), o.len());
        let (mut max, mut sum, mut n) = (0u8, 0.0, 0usize);
        for ((tk, tv), (ok, ov)) in t.iter().zip(&o) {
            assert_eq!(tk, ok);
            let (td, od) = (parse_datum(tv), parse_datum(ov));
            if tk.ends_with(b"rotated.jpg") && our_flags.is_empty() {
                assert_eq!((td.width, td.height), (Some(24), Some(40)));
            }
            assert_eq!(
                (td.channels, td.height, td.width, td.label),
                (od.channels, od.height, od.width, od.label)
            );
            let (m, mean) = pixel_difference(&td.data.unwrap(), &od.data.unwrap());
            max = max.max(m);
            sum += mean;
            n += 1;
        }
        let mean = sum / n as f64;
        println!("JPEG {our_flags:?}: max |diff| {max}, mean |diff| {mean:.3} against OpenCV");
        assert!(
            max <= max_allowed,
            "{our_flags:?}: max pixel difference {max}"
        );
        assert!(mean < 0.5, "{our_flags:?}: mean pixel difference {mean}");
    }
}

#[test]
fn folders_mode_writes_label_map_and_matches_its_list() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("classes");
    // Created out of order: labels follow sorted names, not creation.
    write_class_folders(&root, 3, 3, 20, "png", 3);
    std::fs::rename(root.join("class_000"), root.join("zebra")).unwrap();
    std::fs::write(root.join("class_001/notes.txt"), "not an image").unwrap();
    let out = dir.path().join("db");
    lmdbio_ok(&["--folders", root.to_str().unwrap(), out.to_str().unwrap()]);
    let labels = std::fs::read_to_string(out.join("labels.txt")).unwrap();
    assert_eq!(labels, "0 class_001\n1 class_002\n2 zebra\n");
    let list = std::fs::read_to_string(out.join("list.txt")).unwrap();
    assert_eq!(list.lines().count(), 9);
    assert!(list.starts_with("class_001/img_00000.png 0\n"), "{list}");
    assert!(list.ends_with("zebra/img_00002.png 2\n"), "{list}");
    // convert_imageset given the list we wrote makes the same database.
    let theirs = dir.path().join("theirs");
    convert_imageset(&[], &root, &out.join("list.txt"), &theirs);
    assert_eq!(read_db(&theirs), read_db(&out));
}

#[test]
fn round_trip_through_dump_and_liblmdb() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("imgs");
    let lines = write_class_folders(&root, 2, 5, 24, "png", 11);
    let list = dir.path().join("list.txt");
    write_list(&list, &lines);
    let out = dir.path().join("db");
    lmdbio_ok(&[
        "--shuffle",
        "--seed",
        "9",
        "--commit-every",
        "3",
        root.to_str().unwrap(),
        list.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    let dump = |program: &str, args: &[&str]| {
        let o = Command::new(program).args(args).arg(&out).output().unwrap();
        assert!(o.status.success(), "{program}");
        o.stdout
    };
    let ours = dump(env!("CARGO_BIN_EXE_lmdbio"), &["dump"]);
    assert!(
        ours == dump("mdb_dump", &[]),
        "lmdbio dump differs from mdb_dump"
    );
    let records = read_db(&out);
    assert_eq!(records.len(), lines.len());
    let mut seen = std::collections::HashSet::new();
    let mut shuffled = false;
    for (i, (key, value)) in records.iter().enumerate() {
        let key = String::from_utf8(key.clone()).unwrap();
        let (prefix, rel) = key.split_once('_').unwrap();
        assert_eq!(prefix, format!("{i:08}"));
        let source = lines.iter().find(|(p, _)| p == rel).unwrap();
        shuffled |= lines[i].0 != rel;
        assert!(seen.insert(rel.to_string()));
        let d = parse_datum(value);
        let (w, h, pixels) = planar_bgr(&root.join(rel));
        assert_eq!(
            (d.channels, d.height, d.width),
            (Some(3), Some(h as u64), Some(w as u64))
        );
        assert_eq!(d.label, Some(source.1));
        assert_eq!(d.encoded, Some(false));
        assert!(
            d.data.unwrap() == pixels,
            "{rel}: pixels differ from the source"
        );
    }
    assert!(shuffled, "--shuffle left the order unchanged");
    // The same seed gives the same order.
    let again = dir.path().join("again");
    lmdbio_ok(&[
        "--shuffle",
        "--seed",
        "9",
        root.to_str().unwrap(),
        list.to_str().unwrap(),
        again.to_str().unwrap(),
    ]);
    assert_eq!(read_db(&again), records);
}

#[test]
fn hdf5_round_trip() {
    let dir = TempDir::new().unwrap();
    let (n, c, h, w) = (300usize, 2usize, 3usize, 4usize);
    let floats: Vec<f32> = (0..n * c * h * w).map(|i| i as f32 * 0.25 - 7.0).collect();
    let labels: Vec<f32> = (0..n).map(|i| (i % 5) as f32).collect();
    let bytes: Vec<u8> = (0..n * c * h * w).map(|i| (i * 7 % 251) as u8).collect();
    let write = |name: &str, uint8: bool| -> PathBuf {
        let path = dir.path().join(name);
        let file = hdf5_metno::File::create(&path).unwrap();
        let shape = [n, c, h, w];
        if uint8 {
            let arr = ndarray::Array::from_shape_vec(shape, bytes.clone()).unwrap();
            file.new_dataset_builder()
                .with_data(&arr)
                .create("data")
                .unwrap();
        } else {
            let arr = ndarray::Array::from_shape_vec(shape, floats.clone()).unwrap();
            file.new_dataset_builder()
                .with_data(&arr)
                .create("data")
                .unwrap();
        }
        // Integer labels in one file, float labels (HDF5Data's usual) in the other.
        if uint8 {
            let ints: Vec<i32> = labels.iter().map(|&l| l as i32).collect();
            let arr = ndarray::Array::from_shape_vec([n], ints).unwrap();
            file.new_dataset_builder()
                .with_data(&arr)
                .create("label")
                .unwrap();
        } else {
            let arr = ndarray::Array::from_shape_vec([n, 1], labels.clone()).unwrap();
            file.new_dataset_builder()
                .with_data(&arr)
                .create("label")
                .unwrap();
        }
        path
    };
    for uint8 in [false, true] {
        let h5 = write(if uint8 { "u8.h5" } else { "f32.h5" }, uint8);
        let out = dir.path().join(if uint8 { "u8db" } else { "f32db" });
        lmdbio_ok(&[
            "--hdf5",
            h5.to_str().unwrap(),
            "--commit-every",
            "100",
            out.to_str().unwrap(),
        ]);
        let records = read_db(&out);
        assert_eq!(records.len(), n);
        let row = c * h * w;
        for (i, (key, value)) in records.iter().enumerate() {
            assert_eq!(key, format!("{i:08}").as_bytes());
            let d = parse_datum(value);
            assert_eq!(
                (d.channels, d.height, d.width),
                (Some(c as u64), Some(h as u64), Some(w as u64))
            );
            assert_eq!(d.label, Some((i % 5) as i32));
            if uint8 {
                assert_eq!(d.data.as_deref(), Some(&bytes[i * row..(i + 1) * row]));
                assert!(d.float_data.is_empty());
            } else {
                assert_eq!(d.data, None);
                assert_eq!(d.float_data, floats[i * row..(i + 1) * row]);
            }
        }
    }
    // N×D data: D channels of 1×1, as HDF5Data's flat features.
    let path = dir.path().join("flat.h5");
    let file = hdf5_metno::File::create(&path).unwrap();
    let flat: Vec<f64> = (0..12).map(|i| i as f64 / 2.0).collect();
    file.new_dataset_builder()
        .with_data(&ndarray::Array::from_shape_vec([2, 6], flat).unwrap())
        .create("data")
        .unwrap();
    file.new_dataset_builder()
        .with_data(&ndarray::Array::from_shape_vec([2], vec![3u8, 4]).unwrap())
        .create("label")
        .unwrap();
    drop(file);
    let out = dir.path().join("flatdb");
    lmdbio_ok(&["--hdf5", path.to_str().unwrap(), out.to_str().unwrap()]);
    let records = read_db(&out);
    let d = parse_datum(&records[1].1);
    assert_eq!(
        (d.channels, d.height, d.width, d.label),
        (Some(6), Some(1), Some(1), Some(4))
    );
    assert_eq!(d.float_data, [3.0, 3.5, 4.0, 4.5, 5.0, 5.5]);

    // A label that is not an integer is refused, naming the row.
    let path = dir.path().join("bad.h5");
    let file = hdf5_metno::File::create(&path).unwrap();
    file.new_dataset_builder()
        .with_data(&ndarray::Array::from_shape_vec([2, 1], vec![1.0f32, 2.0]).unwrap())
        .create("data")
        .unwrap();
    file.new_dataset_builder()
        .with_data(&ndarray::Array::from_shape_vec([2], vec![0.0f32, 0.5]).unwrap())
        .create("label")
        .unwrap();
    drop(file);
    let out = lmdbio(&[
        "--hdf5",
        path.to_str().unwrap(),
        dir.path().join("x").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("label 1 is 0.5"), "{err}");
    let x = dir.path().join("x");
    let out = lmdbio(&[
        "--hdf5",
        path.to_str().unwrap(),
        "--gray",
        x.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--gray applies to images"),
        "{err}"
    );
    assert!(!dir.path().join("x").exists());
}

#[test]
fn bad_inputs_get_clear_messages_and_leave_nothing() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("imgs");
    std::fs::create_dir(&root).unwrap();
    write_image(&root.join("ok.png"), &sample_rgb(1, 8, 8), 8, 8, 3);
    std::fs::write(root.join("junk.png"), b"this is not an image").unwrap();
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let run = |list_text: &str, extra: &[&str], out: &str| -> (bool, String) {
        let list = dir.path().join("list.txt");
        std::fs::write(&list, list_text).unwrap();
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        args.extend([path(&root), path(&list), path(&dir.path().join(out))]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = lmdbio(&args);
        let text =
            String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&o.stdout);
        (o.status.success(), text)
    };
    let no_leftovers = || {
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("partial"))
            .collect();
        assert!(names.is_empty(), "left behind: {names:?}");
    };

    // Missing file and undecodable image: reported, skipped, counted.
    let (ok, text) = run("ok.png 0\nmissing.png 1\njunk.png 2\n", &[], "a");
    assert!(ok, "{text}");
    assert!(
        text.contains("line 2") && text.contains("missing.png"),
        "{text}"
    );
    assert!(text.contains("No such file"), "{text}");
    assert!(
        text.contains("line 3") && text.contains("junk.png"),
        "{text}"
    );
    assert!(text.contains("not a known image format"), "{text}");
    assert!(
        text.contains("wrote 1 records") && text.contains("(2 skipped)"),
        "{text}"
    );
    assert_eq!(read_db(&dir.path().join("a")).len(), 1);
    // --strict makes the first failure fatal and writes nothing.
    let (ok, text) = run("ok.png 0\nmissing.png 1\n", &["--strict"], "b");
    assert!(!ok && text.contains("missing.png"), "{text}");
    assert!(!dir.path().join("b").exists());
    // Empty list, bad label, no label.
    let (ok, text) = run("", &[], "c");
    assert!(!ok && text.contains("the list has no entries"), "{text}");
    let (ok, text) = run("ok.png 0\nok.png one\n", &[], "c");
    assert!(
        !ok && text.contains("list.txt:2: bad label \"one\""),
        "{text}"
    );
    let (ok, text) = run("ok.png\n", &[], "c");
    assert!(!ok && text.contains("list.txt:1: no label"), "{text}");
    assert!(!dir.path().join("c").exists());
    // Nothing decodable at all.
    let (ok, text) = run("junk.png 0\n", &[], "c");
    assert!(!ok && text.contains("none of the 1 images"), "{text}");
    assert!(!dir.path().join("c").exists());
    // An existing OUT is refused, and kept, unless --overwrite.
    let (ok, text) = run("ok.png 3\n", &[], "a");
    assert!(
        !ok && text.contains("already exists (use --overwrite"),
        "{text}"
    );
    assert_eq!(read_db(&dir.path().join("a")).len(), 1);
    let (ok, text) = run("ok.png 3\nok.png 4\n", &["--overwrite"], "a");
    assert!(ok, "{text}");
    assert_eq!(read_db(&dir.path().join("a")).len(), 2);
    // --check-size names the odd image out.
    write_image(&root.join("big.png"), &sample_rgb(2, 9, 8), 9, 8, 3);
    let (ok, text) = run("ok.png 0\nbig.png 0\n", &["--check-size"], "d");
    assert!(
        !ok && text.contains("big.png") && text.contains("--check-size"),
        "{text}"
    );
    // Usage errors.
    let (ok, text) = run("ok.png 0\n", &["--resize", "12by4"], "d");
    assert!(!ok && text.contains("expected WxH"), "{text}");
    let o = lmdbio(&["--folders", path(&dir.path().join("nowhere")).as_str(), "x"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("nowhere"));
    no_leftovers();
}

#[test]
fn stock_caffe_trains_on_the_output() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("classes");
    write_class_folders(&root, 3, 8, 16, "png", 5);
    let db = dir.path().join("train_lmdb");
    lmdbio_ok(&["--folders", root.to_str().unwrap(), db.to_str().unwrap()]);
    let net = format!(
        r#"name: "tiny"
layer {{ name: "data" type: "Data" top: "data" top: "label"
  transform_param {{ scale: 0.00390625 }}
  data_param {{ source: "{}" backend: LMDB batch_size: 8 }} }}
layer {{ name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param {{ num_output: 3 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }}
"#,
        db.display()
    );
    std::fs::write(dir.path().join("net.prototxt"), net).unwrap();
    let solver = format!(
        "net: \"{}\"\nbase_lr: 0.01\nlr_policy: \"fixed\"\nmax_iter: 12\ndisplay: 1\n\
         solver_mode: CPU\nsnapshot_after_train: false\n",
        dir.path().join("net.prototxt").display()
    );
    let solver_path = dir.path().join("solver.prototxt");
    std::fs::write(&solver_path, solver).unwrap();
    let out = Command::new("timeout")
        .args(["-k", "5", "120", "caffe", "train"])
        .arg(format!("--solver={}", solver_path.display()))
        .env("GLOG_logtostderr", "1")
        .current_dir(dir.path())
        .output()
        .expect("run caffe (Debian's caffe package)");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "caffe train failed:\n{log}");
    let losses: Vec<f64> = log
        .lines()
        .filter(|l| l.contains("Train net output") && l.contains("loss = "))
        .map(|l| {
            let v = l.split("loss = ").nth(1).unwrap();
            v.split_whitespace().next().unwrap().parse().unwrap()
        })
        .collect();
    assert!(losses.len() >= 12, "expected a loss per iteration:\n{log}");
    assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");
    assert!(log.contains("Optimization Done"), "{log}");
    println!("caffe losses: {losses:?}");
}

#[test]
fn interrupt_leaves_nothing_behind() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("imgs");
    let lines = write_class_folders(&root, 1, 1, 64, "png", 1);
    // Many lines naming the same image: a long run from one small file.
    let many: Vec<(String, i32)> = (0..200_000).map(|_| lines[0].clone()).collect();
    let list = dir.path().join("list.txt");
    write_list(&list, &many);
    let out = dir.path().join("db");
    let child = Command::new(env!("CARGO_BIN_EXE_lmdbio"))
        .args(["convert", "--threads", "1"])
        .args([&root, &list, &out])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let partial = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().contains("partial"))
    };
    let started = std::time::Instant::now();
    while !partial() && started.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(partial(), "no temporary database appeared");
    let signalled = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
    let result = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(
        !result.status.success(),
        "conversion finished before the signal"
    );
    assert!(err.contains("interrupted"), "{err}");
    assert!(!out.exists());
    assert!(!partial(), "the temporary database was left behind");
}

#[test]
fn re_encoded_records_decode_to_the_raw_pixels() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("imgs");
    let lines = write_class_folders(&root, 1, 4, 30, "bmp", 21);
    let list = dir.path().join("list.txt");
    write_list(&list, &lines);
    let (r, l) = (root.to_str().unwrap(), list.to_str().unwrap());
    let raw = dir.path().join("raw");
    let png = dir.path().join("png");
    lmdbio_ok(&["--resize", "20x18", r, l, raw.to_str().unwrap()]);
    lmdbio_ok(&[
        "--resize",
        "20x18",
        "--encoded",
        "--encode-type",
        "png",
        r,
        l,
        png.to_str().unwrap(),
    ]);
    let (raw, png) = (read_db(&raw), read_db(&png));
    assert_eq!(raw.len(), 4);
    for ((rk, rv), (pk, pv)) in raw.iter().zip(&png) {
        assert_eq!(rk, pk);
        let (r, p) = (parse_datum(rv), parse_datum(pv));
        assert_eq!(
            (p.encoded, p.label, p.channels),
            (Some(true), r.label, None)
        );
        let file = dir.path().join("one.png");
        std::fs::write(&file, p.data.unwrap()).unwrap();
        let (w, h, pixels) = planar_bgr(&file);
        assert_eq!((w, h), (20, 18));
        assert!(
            pixels == r.data.unwrap(),
            "re-encoded PNG decodes to other pixels"
        );
    }
}
