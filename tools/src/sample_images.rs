//! `lmdbio sample-images`: a folder of seeded pictures to try `lmdbio
//! convert` on, made by the test kit's generator (the fixtures' own).

use std::path::PathBuf;

use crate::CommandError;

#[derive(clap::Args)]
pub struct Args {
    /// Folder to write: ROOT/class_NNN/img_NNNNN.EXT and ROOT/list.txt.
    root: PathBuf,
    /// Number of classes (sub-folders).
    classes: usize,
    /// Images per class.
    per_class: usize,
    /// Width and height of each image, in pixels.
    #[arg(default_value_t = 64)]
    side: u32,
    /// Image format.
    #[arg(default_value = "png", value_parser = ["png", "jpg", "bmp", "ppm"])]
    format: String,
}

pub fn run(args: &Args) -> Result<(), CommandError> {
    if args.side == 0 {
        return Err(CommandError::Usage(
            "sample-images: SIDE must be at least 1".into(),
        ));
    }
    let images = lmdbio_testkit::images::write_sample_folder(
        &args.root,
        args.classes,
        args.per_class,
        args.side,
        &args.format,
    )
    .map_err(|e| CommandError::Usage(format!("sample-images: {e}")))?;
    println!(
        "wrote {images} images in {} classes to {} (and {})",
        args.classes,
        args.root.display(),
        args.root.join("list.txt").display()
    );
    Ok(())
}
