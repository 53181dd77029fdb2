//! `--hdf5 FILE.h5`: the layout Caffe's HDF5Data layer reads, a `data`
//! dataset (N×C×H×W, N×C×H, or N×D) and a `label` dataset (N or N×1).
//! uint8 data becomes `data` bytes, any other type `float_data`; keys are
//! the 8-digit record number. Rows are read a block at a time so the file
//! can be larger than memory.

use std::path::Path;

use hdf5::{Dataset, Hyperslab, Selection, SliceOrIndex};
use hdf5_metno as hdf5;

use super::datum;
use super::ConvertError;

/// Rows read per HDF5 call.
const BLOCK_ROWS: usize = 256;

pub struct Hdf5Source {
    data: Dataset,
    labels: Vec<i32>,
    shape: [u32; 3],
    is_uint8: bool,
    path: String,
}

impl Hdf5Source {
    pub fn open(path: &Path) -> Result<Hdf5Source, ConvertError> {
        let shown = path.display().to_string();
        let err = |what: String| ConvertError::Input(format!("{shown}: {what}"));
        // HDF5 opens by name; a FIFO or device must be refused before.
        super::guard::open_input(path).map_err(|e| err(format!("opening HDF5: {e}")))?;
        let file = hdf5::File::open(path).map_err(|e| err(format!("opening HDF5: {e}")))?;
        let data = file
            .dataset("data")
            .map_err(|e| err(format!("no dataset `data`: {e}")))?;
        let label = file
            .dataset("label")
            .map_err(|e| err(format!("no dataset `label`: {e}")))?;
        let dims = data.shape();
        let rows = *dims
            .first()
            .ok_or_else(|| err("`data` is a scalar".into()))?;
        let shape = match dims[1..] {
            [c, h, w] => [c, h, w],
            [c, h] => [c, h, 1],
            [d] => [d, 1, 1],
            _ => {
                return Err(err(format!(
                    "`data` has shape {dims:?}: expected N×C×H×W, N×C×H or N×D"
                )))
            }
        };
        let shape = shape.map(|d| d as u32);
        let ldims = label.shape();
        if ldims.first() != Some(&rows) || ldims.iter().skip(1).any(|&d| d != 1) {
            return Err(err(format!(
                "`label` has shape {ldims:?}: expected [{rows}] or [{rows}, 1] to match `data`"
            )));
        }
        let raw_labels: Vec<f64> = label
            .read_raw()
            .map_err(|e| err(format!("reading `label`: {e}")))?;
        let labels = raw_labels
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if v.fract() == 0.0 && v >= i32::MIN as f64 && v <= i32::MAX as f64 {
                    Ok(v as i32)
                } else {
                    Err(err(format!("label {i} is {v}: a Datum label is an int32")))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let is_uint8 = data
            .dtype()
            .map_err(|e| err(format!("`data` type: {e}")))?
            .is::<u8>();
        Ok(Hdf5Source {
            data,
            labels,
            shape,
            is_uint8,
            path: shown,
        })
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Calls `sink(key, value)` for every row in order.
    pub fn for_each_record(
        &self,
        mut sink: impl FnMut(&[u8], &[u8]) -> Result<(), ConvertError>,
    ) -> Result<(), ConvertError> {
        let ndim = self.data.ndim();
        let row_len = self.shape.iter().map(|&d| d as usize).product::<usize>();
        let mut start = 0;
        while start < self.len() {
            let end = (start + BLOCK_ROWS).min(self.len());
            let mut dims: Vec<SliceOrIndex> = vec![(start..end).into()];
            dims.extend((1..ndim).map(|_| SliceOrIndex::from(..)));
            let selection = Selection::from(Hyperslab::from(dims));
            let read_err = |e: hdf5::Error| {
                ConvertError::Input(format!("{}: reading rows {start}..{end}: {e}", self.path))
            };
            if self.is_uint8 {
                let block = self
                    .data
                    .read_slice::<u8, _, ndarray::IxDyn>(selection)
                    .map_err(read_err)?;
                let flat: Vec<u8> = block.iter().copied().collect();
                for (n, row) in flat.chunks_exact(row_len.max(1)).enumerate() {
                    let i = start + n;
                    sink(
                        &key(i),
                        &datum::uint8_array(self.shape, row, self.labels[i]),
                    )?;
                }
            } else {
                let block = self
                    .data
                    .read_slice::<f32, _, ndarray::IxDyn>(selection)
                    .map_err(read_err)?;
                let flat: Vec<f32> = block.iter().copied().collect();
                for (n, row) in flat.chunks_exact(row_len.max(1)).enumerate() {
                    let i = start + n;
                    sink(
                        &key(i),
                        &datum::float_array(self.shape, row, self.labels[i]),
                    )?;
                }
            }
            start = end;
        }
        Ok(())
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("{i:08}").into_bytes()
}
