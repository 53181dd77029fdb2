//! Writes a sample image folder for `lmdbio convert --folders`: one
//! sub-folder per class of seeded pictures (see `lmdbio_testkit::images`).
//! The same as `lmdbio sample-images`, for tests that build only the kit.
//!
//! usage: `lmdbio-sample-images ROOT CLASSES PER_CLASS [SIDE] [png|jpg|bmp|ppm]`

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: lmdbio-sample-images ROOT CLASSES PER_CLASS [SIDE] [png|jpg|bmp|ppm]";
    if !(3..=5).contains(&args.len()) {
        eprintln!("{usage}");
        return ExitCode::FAILURE;
    }
    let number = |i: usize, default: usize| -> Option<usize> {
        args.get(i).map_or(Some(default), |s| s.parse().ok())
    };
    let (Some(classes), Some(per_class), Some(side)) = (number(1, 0), number(2, 0), number(3, 64))
    else {
        eprintln!("{usage}");
        return ExitCode::FAILURE;
    };
    let ext = args.get(4).map_or("png", String::as_str);
    if !["png", "jpg", "bmp", "ppm"].contains(&ext) {
        eprintln!("{usage}");
        return ExitCode::FAILURE;
    }
    let root = std::path::Path::new(&args[0]);
    match lmdbio_testkit::images::write_sample_folder(root, classes, per_class, side as u32, ext) {
        Ok(images) => {
            println!(
                "wrote {images} images in {classes} classes to {}",
                root.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
