//! Command-line options of `lmdbio convert`, named as `convert_imageset`
//! names its flags (the underscore spellings are accepted too).

use std::path::PathBuf;

use super::ConvertError;

#[derive(clap::Args, Debug)]
#[command(override_usage = "lmdbio convert [OPTIONS] ROOT LIST OUT\n       \
                      lmdbio convert [OPTIONS] --folders ROOT OUT\n       \
                      lmdbio convert [OPTIONS] --hdf5 FILE.h5 OUT")]
pub struct Args {
    /// ROOT LIST OUT (a convert_imageset list), ROOT OUT with --folders, or
    /// OUT with --hdf5.
    #[arg(value_name = "PATHS", num_args = 1..=3, required = true)]
    pub paths: Vec<PathBuf>,
    /// ROOT holds one sub-folder per class (sorted names get labels
    /// 0..K-1); OUT gets labels.txt and list.txt beside data.mdb.
    #[arg(long)]
    pub folders: bool,
    /// Convert an HDF5 file with datasets `data` (N×C×H×W or N×D) and
    /// `label` (N or N×1), as Caffe's HDF5Data layer reads it.
    #[arg(long, value_name = "FILE.h5", conflicts_with = "folders")]
    pub hdf5: Option<PathBuf>,
    /// Resize every image to W×H (bilinear, as cv::resize).
    #[arg(long, value_name = "WxH")]
    pub resize: Option<String>,
    /// Resize width (both width and height must be set to resize).
    #[arg(long, alias = "resize_width", value_name = "W", default_value_t = 0)]
    pub resize_width: u32,
    /// Resize height (both width and height must be set to resize).
    #[arg(long, alias = "resize_height", value_name = "H", default_value_t = 0)]
    pub resize_height: u32,
    /// One grey channel instead of BGR.
    #[arg(long)]
    pub gray: bool,
    /// Store the image file's bytes (`encoded=true`) instead of pixels.
    #[arg(long)]
    pub encoded: bool,
    /// With --encoded: re-encode every image as jpg or png (needed when
    /// resizing or when the files have other formats).
    #[arg(long, alias = "encode_type", value_name = "jpg|png")]
    pub encode_type: Option<String>,
    /// Shuffle the lines before numbering them.
    #[arg(long)]
    pub shuffle: bool,
    /// Seed for --shuffle (default: from the clock, printed).
    #[arg(long, requires = "shuffle")]
    pub seed: Option<u64>,
    /// Fail unless every image has the same data size as the first.
    #[arg(long, alias = "check_size")]
    pub check_size: bool,
    /// Decoding threads (default: all cores).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Records per write transaction (convert_imageset: 1000).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub commit_every: usize,
    /// Any image that fails to read or decode is an error instead of being
    /// reported and skipped.
    #[arg(long)]
    pub strict: bool,
    /// Replace OUT if it exists.
    #[arg(long)]
    pub overwrite: bool,
    /// No progress output (the summary is still printed).
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// What to convert, from the positional paths and the mode flags.
pub enum Source {
    List { root: PathBuf, list: PathBuf },
    Folders { root: PathBuf },
    Hdf5 { file: PathBuf },
}

impl Args {
    pub fn source_and_out(&self) -> Result<(Source, PathBuf), ConvertError> {
        let usage = |what: &str| {
            ConvertError::Usage(format!(
                "{what}: expected ROOT LIST OUT, --folders ROOT OUT or --hdf5 FILE.h5 OUT"
            ))
        };
        let p = &self.paths;
        match (&self.hdf5, self.folders, p.len()) {
            (Some(file), _, 1) => Ok((Source::Hdf5 { file: file.clone() }, p[0].clone())),
            (Some(_), _, _) => Err(usage("--hdf5 takes OUT only")),
            (None, true, 2) => Ok((Source::Folders { root: p[0].clone() }, p[1].clone())),
            (None, true, _) => Err(usage("--folders takes ROOT OUT")),
            (None, false, 3) => Ok((
                Source::List {
                    root: p[0].clone(),
                    list: p[1].clone(),
                },
                p[2].clone(),
            )),
            (None, false, _) => Err(usage("wrong number of paths")),
        }
    }

    /// Target size (width, height) or None; like convert_imageset, only
    /// when both are positive.
    pub fn resize(&self) -> Result<Option<(u32, u32)>, ConvertError> {
        let (w, h) = match &self.resize {
            Some(text) => {
                let parsed = text.split_once(['x', 'X']).and_then(|(w, h)| {
                    Some((w.trim().parse::<u32>().ok()?, h.trim().parse::<u32>().ok()?))
                });
                parsed.ok_or_else(|| {
                    ConvertError::Usage(format!("--resize {text:?}: expected WxH, e.g. 256x256"))
                })?
            }
            None => (self.resize_width, self.resize_height),
        };
        Ok((w > 0 && h > 0).then_some((w, h)))
    }

    pub fn encode_type(&self) -> Result<Option<ReEncode>, ConvertError> {
        match self.encode_type.as_deref().map(str::to_ascii_lowercase) {
            None => Ok(None),
            Some(t) if t.is_empty() => Ok(None),
            Some(t) if t == "jpg" || t == "jpeg" => Ok(Some(ReEncode::Jpg)),
            Some(t) if t == "png" => Ok(Some(ReEncode::Png)),
            Some(t) => Err(ConvertError::Usage(format!(
                "--encode-type {t:?}: expected jpg or png"
            ))),
        }
    }

    pub fn threads(&self) -> usize {
        self.threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReEncode {
    Jpg,
    Png,
}
