//! Character-level vocabulary: padding, end of sequence, digits, a few operators, task markers.

pub const PAD: u32 = 0;
pub const EOS: u32 = 1;
const CHARS: &str = "0123456789+=SRA";

/// Token ids: 0 `<pad>`, 1 `<eos>`, then one id per character of `0123456789+=SRA`.
#[derive(Clone, Debug, Default)]
pub struct Tokenizer;

impl Tokenizer {
    pub fn vocab_size(&self) -> usize {
        2 + CHARS.len()
    }

    pub fn digit(&self, d: u8) -> u32 {
        debug_assert!(d < 10);
        2 + u32::from(d)
    }

    /// The digit value of a token, if it is a digit.
    pub fn as_digit(&self, tok: u32) -> Option<u8> {
        (2..12).contains(&tok).then(|| (tok - 2) as u8)
    }

    pub fn encode(&self, s: &str) -> Vec<u32> {
        s.chars()
            .map(|c| {
                let i = CHARS
                    .find(c)
                    .unwrap_or_else(|| panic!("character '{c}' is not in the vocabulary"));
                2 + i as u32
            })
            .collect()
    }

    /// Human-readable text; `<pad>` and `<eos>` spelled out, unknown ids as `<?id>`.
    pub fn decode(&self, toks: &[u32]) -> String {
        toks.iter()
            .map(|&t| match t {
                PAD => "<pad>".to_string(),
                EOS => "<eos>".to_string(),
                t if (t as usize) < self.vocab_size() => CHARS
                    .chars()
                    .nth(t as usize - 2)
                    .expect("in range")
                    .to_string(),
                t => format!("<?{t}>"),
            })
            .collect()
    }
}
