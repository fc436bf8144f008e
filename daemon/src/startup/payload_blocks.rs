//! `xtcqd --payload-blocks SIZE=COUNT,...`: how many payload blocks each size class gets.
//!
//! - SIZE is a class's block size: a power of two from 128 bytes to 16 MiB, in bytes or with
//!   a `K`/`KiB`/`M`/`MiB` suffix (powers of 1024);
//! - a class the list does not name gets no blocks (the flag replaces the default wholly);
//! - repeated flags add up, as one list joined by commas;
//! - a size named twice, a size that is no class, or a count out of range is refused with a
//!   message that says which.

use xtcq_shm::layout::payload::{class_size, MAX_CLASS_BLOCKS, PAYLOAD_CLASSES};

/// Parses the flag's value into a block count per class.
pub fn parse(spec: &str) -> Result<[u32; PAYLOAD_CLASSES], String> {
    let mut out = [0u32; PAYLOAD_CLASSES];
    let mut seen = [false; PAYLOAD_CLASSES];
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (size, count) = item
            .split_once('=')
            .ok_or_else(|| format!("--payload-blocks: {item:?} is not SIZE=COUNT (e.g. 4KiB=1024)"))?;
        let bytes = parse_size(size.trim())
            .ok_or_else(|| format!("--payload-blocks: {size:?} is not a size (e.g. 4096, 4K, 4KiB, 1MiB)"))?;
        let class = (0..PAYLOAD_CLASSES).find(|&k| class_size(k) as u64 == bytes).ok_or_else(|| {
            format!("--payload-blocks: {bytes} bytes is not a block size; the sizes are the powers of two from 128 to 16MiB")
        })?;
        let n: u32 = count.trim().parse().ok().filter(|&n| n <= MAX_CLASS_BLOCKS).ok_or_else(|| {
            format!("--payload-blocks: {count:?} blocks of {size}: a count is 0 to {MAX_CLASS_BLOCKS}")
        })?;
        if std::mem::replace(&mut seen[class], true) {
            return Err(format!(
                "--payload-blocks: {bytes}-byte blocks are given twice; give each size once \
                 (the lists of repeated --payload-blocks flags add up)"
            ));
        }
        out[class] = n;
    }
    Ok(out)
}

/// `4096`, `4K`, `4KiB`, `1M`, `1MiB` (case-insensitive suffix) in bytes.
fn parse_size(s: &str) -> Option<u64> {
    let lower = s.to_ascii_lowercase();
    let (digits, mult) = [("kib", 1u64 << 10), ("k", 1 << 10), ("mib", 1 << 20), ("m", 1 << 20), ("", 1)]
        .iter()
        .find_map(|&(suffix, m)| lower.strip_suffix(suffix).map(|d| (d.trim().to_string(), m)))?;
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn sizes_and_counts_parse_and_the_rest_is_zero() {
        let b = parse("4KiB=1024, 65536=16,128=0").unwrap();
        assert_eq!((b[5], b[9], b[0]), (1024, 16, 0));
        assert_eq!(b.iter().filter(|&&n| n > 0).count(), 2);
        assert_eq!(parse("1M=2").unwrap()[13], 2);
    }

    #[test]
    fn bad_lists_say_what_is_wrong() {
        assert!(parse("4KiB").unwrap_err().contains("SIZE=COUNT"));
        assert!(parse("3000=1").unwrap_err().contains("not a block size"));
        assert!(parse("64=1").unwrap_err().contains("not a block size"));
        assert!(parse("4K=x").unwrap_err().contains("a count is"));
        assert!(parse("4K=1,4096=2").unwrap_err().contains("twice"));
        assert!(parse("lots=1").unwrap_err().contains("not a size"));
    }
}
