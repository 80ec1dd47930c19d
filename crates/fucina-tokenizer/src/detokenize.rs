//! The space clean-up of llama.cpp's `llama_detokenize` (`clean_spaces`, set by most
//! BPE pretokenizers), reproduced byte for byte: three in-place passes over the
//! rendered text, including the quirk that the second pass overwrites the space after a
//! lone apostrophe with NUL, which the next position's look-behind then sees.

/// Apply llama.cpp's three `clean_spaces` passes to `text`.
pub(crate) fn clean_spaces(text: &mut Vec<u8>) {
    // " ?", " !", " .", " ,": drop the space.
    let n = text.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }

    // " ' ": drop both spaces around a lone apostrophe.
    let n = total;
    total = usize::from(n > 0);
    let mut i = 1;
    while i < n {
        let x = text[i];
        if x == b'\'' && i + 1 < n && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }

    // " 's", " 'm", " 're", " 've": drop the space (" 't", " 'd", " 'll" keep it).
    let n = total;
    total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = text[i + 1];
            if matches!(x1, b's' | b'm') {
                total -= 1;
            } else if !matches!(x1, b't' | b'd') && i + 2 < n {
                let x2 = text[i + 2];
                if matches!((x1, x2), (b'r', b'e') | (b'v', b'e')) {
                    total -= 1;
                }
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

#[cfg(test)]
mod tests {
    use super::clean_spaces;

    fn clean(s: &str) -> String {
        let mut v = s.as_bytes().to_vec();
        clean_spaces(&mut v);
        String::from_utf8(v).expect("utf-8")
    }

    #[test]
    fn follows_llama_cpp() {
        assert_eq!(clean("Hello , world !"), "Hello, world!");
        assert_eq!(clean("a ' b"), "a'b");
        assert_eq!(clean("it 's I 'm we 're you 've"), "it's I'm we're you've");
        assert_eq!(clean("don 't he 'd we 'll"), "don 't he 'd we 'll");
        assert_eq!(clean(" ."), ".");
        assert_eq!(clean(""), "");
        assert_eq!(clean("x"), "x");
        // The NUL written over the space after " ' " hides it from the next look-behind.
        assert_eq!(clean("a ' 's"), "a''s");
    }
}
