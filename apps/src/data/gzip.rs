//! Transparent gzip input: detects gzip by its magic bytes (`1f 8b`), never by
//! the file name, and hands back plain bytes or a plain buffered reader.

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;

use super::error::DataError;

/// The first two bytes of every gzip member.
pub(super) const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Buffer size for streaming reads of large text files.
const READ_BUFFER_BYTES: usize = 1 << 20;

/// Whether `bytes` starts with the gzip magic.
pub(super) fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&GZIP_MAGIC)
}

/// `bytes` itself, or its decompressed content when it is gzip.
///
/// Decompression grows the output as data arrives, so memory is bounded by what the
/// stream really holds, not by anything it claims.
pub(super) fn decode_bytes<'a>(bytes: &'a [u8], path: &Path) -> Result<Cow<'a, [u8]>, DataError> {
    if !is_gzip(bytes) {
        return Ok(Cow::Borrowed(bytes));
    }
    let mut plain = Vec::new();
    MultiGzDecoder::new(bytes)
        .read_to_end(&mut plain)
        .map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(Cow::Owned(plain))
}

/// Opens `path` for buffered streaming, decompressing on the fly when it is gzip.
pub(super) fn open_reader(path: &Path) -> Result<Box<dyn BufRead>, DataError> {
    let file = File::open(path).map_err(|e| DataError::from_io(path, e))?;
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, file);
    let gzip = {
        let head = reader.fill_buf().map_err(|e| DataError::from_io(path, e))?;
        // A file of one byte 0x1f cannot be gzip; `fill_buf` may return a short read
        // only at end of file for regular files.
        is_gzip(head)
    };
    if gzip {
        Ok(Box::new(BufReader::with_capacity(
            READ_BUFFER_BYTES,
            MultiGzDecoder::new(reader),
        )))
    } else {
        Ok(Box::new(reader))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use std::io::Write;

    /// Gzip-compresses `bytes` (test helper shared with the other loaders' tests).
    pub(in super::super) fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn decode_plain_and_gzip() {
        let path = Path::new("mem");
        let plain = b"hello world".to_vec();
        assert!(matches!(
            decode_bytes(&plain, path).unwrap(),
            Cow::Borrowed(_)
        ));
        let packed = gzip(&plain);
        assert!(is_gzip(&packed));
        assert_eq!(decode_bytes(&packed, path).unwrap().as_ref(), &plain[..]);
    }

    #[test]
    fn corrupt_gzip_is_io_error_naming_the_file() {
        let err = decode_bytes(&[0x1f, 0x8b, 0x08, 0, 1, 2, 3], Path::new("bad.gz")).unwrap_err();
        assert!(matches!(err, DataError::Io { .. }));
        assert!(err.to_string().starts_with("cannot read bad.gz: "));
    }

    #[test]
    fn open_reader_detects_gzip_by_content() {
        let dir = tempfile::tempdir().unwrap();
        let plain_path = dir.path().join("looks.gz"); // plain despite the name
        std::fs::write(&plain_path, b"abc\n").unwrap();
        let packed_path = dir.path().join("looks.txt"); // gzip despite the name
        std::fs::write(&packed_path, gzip(b"abc\n")).unwrap();
        for path in [&plain_path, &packed_path] {
            let mut text = String::new();
            open_reader(path)
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            assert_eq!(text, "abc\n");
        }
        let err = open_reader(&dir.path().join("missing")).err().unwrap();
        assert!(matches!(err, DataError::NotFound { .. }));
    }
}
