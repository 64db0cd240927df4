//! SOURCE_DATE_EPOCH for layers: every entry's modification time clamped to the epoch, so
//! that two builds of the same context give the same layer digests (BuildKit's and
//! buildah's `rewrite-timestamp`, done the same way: later times become the epoch, earlier
//! ones stay).

use std::fs::File;
use std::io::{Seek, Write};

/// The layer tar `layer` rewritten with its modification times clamped to `epoch`
/// (seconds), spooled to an unnamed file in `dir`. Extended headers (PAX records such as
/// extended attributes) are carried over.
pub(super) fn clamp_mtimes(
    layer: File,
    epoch: u64,
    dir: &std::path::Path,
) -> std::io::Result<File> {
    let mut out = tempfile::tempfile_in(dir)?;
    {
        let mut archive = tar::Archive::new(std::io::BufReader::new(layer));
        let mut builder = tar::Builder::new(std::io::BufWriter::new(&mut out));
        for entry in archive.entries()? {
            let mut entry = entry?;
            let path = entry.path()?.into_owned();
            let mut h = entry.header().clone();
            if h.mtime()? > epoch {
                h.set_mtime(epoch);
            }
            if let Some(records) = entry.pax_extensions()? {
                let pairs: Vec<(String, Vec<u8>)> = records
                    .filter_map(Result::ok)
                    .filter(|r| !matches!(r.key(), Ok("path" | "linkpath" | "mtime" | "size")))
                    .filter_map(|r| Some((r.key().ok()?.to_string(), r.value_bytes().to_vec())))
                    .collect();
                if !pairs.is_empty() {
                    builder.append_pax_extensions(
                        pairs.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
                    )?;
                }
            }
            match h.entry_type() {
                tar::EntryType::Symlink | tar::EntryType::Link => {
                    let target = entry
                        .link_name()?
                        .map(|l| l.into_owned())
                        .unwrap_or_default();
                    builder.append_link(&mut h, &path, &target)?;
                }
                _ => builder.append_data(&mut h, &path, &mut entry)?,
            }
        }
        builder.into_inner()?.flush()?;
    }
    out.rewind()?;
    Ok(out)
}
