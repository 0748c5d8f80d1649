//! How the fuzz targets (`fuzz/`) cut one input into several messages:
//! each is a little-endian u16 length followed by that many bytes (fewer
//! at the end of the input). The real transports frame messages
//! themselves (a datagram, a length word, a ring record); this cut only
//! decides where the fuzzer's bytes go, the same way in every target.

/// Cut `data` into messages.
pub fn split(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while data.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([data[0], data[1]])).min(data.len() - 2);
        out.push(&data[2..2 + len]);
        data = &data[2 + len..];
    }
    out
}

/// The inverse of [`split`], for writing seed inputs.
pub fn join<B: AsRef<[u8]>>(msgs: &[B]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in msgs {
        let m = m.as_ref();
        let len = u16::try_from(m.len()).expect("seed messages are shorter than 64 KiB");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(m);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_undoes_join_and_stops_at_the_end() {
        let msgs: [&[u8]; 3] = [b"ab", b"", b"xyz"];
        assert_eq!(split(&join(&msgs)), msgs);
        // A length beyond the input takes what is left; a lone byte is dropped.
        assert_eq!(split(&[9, 0, 1, 2]), [&[1u8, 2][..]]);
        assert!(split(&[1]).is_empty());
    }
}
