//! Byte-level BPE vocabularies (`tokenizer.ggml.model` "gpt2": GPT-2, Llama 3, Qwen): tokens and
//! `tokenizer.ggml.merges` over GPT-2's byte alphabet, split first by the regex that
//! `tokenizer.ggml.pre` names (transformers' `GGUF_PRE_TOKENIZER_SPLITS`, llama.cpp's names); a
//! name neither knows is refused, never split by a guess.

use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::models::bpe::{BPE, Vocab as BpeVocab};
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{PreTokenizerWrapper, SplitDelimiterBehavior};

use super::{GgufVocab, Meta};
use crate::TokenizeError;

const LLAMA3: &str = concat!(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
const TEKKEN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
const GPT4O: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
const QWEN2: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35: &str = concat!(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}",
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

/// DeepSeek V3's splits, one after the other: digits in threes, CJK runs, then the rest.
const DEEPSEEK_V3: [&str; 3] = [
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    concat!(
        r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"##,
        r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
];

/// Kimi K2's split (its `tokenization_kimi.py`): Han runs apart, letters without Han after them.
const KIMI_K2: &str = concat!(
    r"[\p{Han}]+",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

/// How a `tokenizer.ggml.pre` value splits text before BPE.
#[derive(Debug, PartialEq)]
enum PreSplit {
    /// By each of these regexes in turn (every piece of one split again by the next), then
    /// byte-level.
    Regex(&'static [&'static str]),
    /// By GPT-2's own regex inside the `ByteLevel` pre-tokenizer.
    Gpt2,
}

/// The split of a `tokenizer.ggml.pre` value (llama.cpp's names); `None` for one this crate
/// does not know, which llama.cpp refuses too.
fn split_regex(pre: &str) -> Option<PreSplit> {
    Some(match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2"
        | "jina-v5-nano" | "dbrx" | "smaug-bpe" | "glm4" | "chatglm-bpe" => PreSplit::Regex(&[LLAMA3]),
        "tekken" => PreSplit::Regex(&[TEKKEN]),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" => PreSplit::Regex(&[QWEN2]),
        "qwen35" => PreSplit::Regex(&[QWEN35]),
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => PreSplit::Regex(&[GPT4O]),
        "deepseek-v3" => PreSplit::Regex(&DEEPSEEK_V3),
        "kimi-k2" => PreSplit::Regex(&[KIMI_K2]),
        "default" | "gpt2" | "gpt-2" | "mpt" | "olmo" | "jais" | "trillion" | "granite-docling" | "phi-2"
        | "jina-es" | "jina-de" | "jina-v1-en" | "jina-v2-es" | "jina-v2-de" | "jina-v2-code" | "roberta-bpe"
        | "gigachat" => PreSplit::Gpt2,
        _ => return None,
    })
}

/// Whether a byte is one GPT-2 shows as itself (printable Latin-1 other than the soft hyphen).
fn printable(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// The character GPT-2's byte alphabet uses for `b`: itself when printable, else 256 + its rank
/// among the others.
fn byte_char(b: u8) -> char {
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + rank).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// Whether `c` is in GPT-2's byte alphabet.
pub(super) fn in_alphabet(c: char) -> bool {
    match u32::from(c) {
        u @ 0..=0xFF => printable(u as u8),
        u => u < 256 + 68,
    }
}

/// A token as the model sees it: as stored when all in the byte alphabet, else its UTF-8 bytes
/// spelled in that alphabet (transformers' `byte_level_tokenizer`).
fn spell(token: &str) -> String {
    if token.chars().all(in_alphabet) { token.to_string() } else { token.bytes().map(byte_char).collect() }
}

/// The model and pipeline, without added tokens or post-processor.
pub(super) fn build(meta: &Meta, file: &GgufVocab, pre: Option<&str>) -> Result<tokenizers::Tokenizer, TokenizeError> {
    let merges = file.merges.clone().ok_or_else(|| meta.bad("tokenizer.ggml.merges", "missing"))?;
    // A token listed twice keeps its last id, as a Python dict does.
    let vocab: BpeVocab = file.tokens.iter().enumerate().map(|(id, t)| (spell(t), id as u32)).collect();
    let model = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .continuing_subword_prefix(String::new())
        .end_of_word_suffix(String::new())
        .fuse_unk(false)
        .build()
        .map_err(|e| meta.bad("tokenizer.ggml.merges", &e.to_string()))?;
    let mut inner = tokenizers::Tokenizer::new(model);
    let split = match pre {
        None => PreSplit::Gpt2,
        Some(p) => split_regex(p)
            .ok_or_else(|| meta.bad("tokenizer.ggml.pre", &format!("pre-tokenizer {p:?} is not known")))?,
    };
    inner.with_pre_tokenizer(Some(pre_tokenizer(split).map_err(|e| meta.bad("tokenizer.ggml.pre", &e))?));
    inner.with_decoder(Some(ByteLevel::default()));
    Ok(inner)
}

/// The pre-tokenizer of `split`: its regexes in turn, then GPT-2's byte alphabet.
fn pre_tokenizer(split: PreSplit) -> Result<PreTokenizerWrapper, String> {
    match split {
        PreSplit::Regex(regexes) => {
            let mut steps: Vec<PreTokenizerWrapper> = Vec::new();
            for regex in regexes {
                let split = Split::new(SplitPattern::Regex(regex.to_string()), SplitDelimiterBehavior::Isolated, false)
                    .map_err(|e| e.to_string())?;
                steps.push(split.into());
            }
            steps.push(ByteLevel::new(false, true, false).into());
            Ok(Sequence::new(steps).into())
        }
        PreSplit::Gpt2 => Ok(ByteLevel::new(false, true, true).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_alphabet_is_gpt2s() {
        let chars: Vec<char> = (0..=255u8).map(byte_char).collect();
        assert_eq!(chars[b' ' as usize], '\u{120}');
        assert_eq!(chars[b'\n' as usize], '\u{10a}');
        assert_eq!(chars[0xAD], '\u{143}');
        assert_eq!(chars[b'a' as usize], 'a');
        assert!(chars.iter().all(|&c| in_alphabet(c)));
        let distinct: std::collections::HashSet<char> = chars.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
        assert!(!in_alphabet(' ') && !in_alphabet('\u{144}') && in_alphabet('é'));
        assert_eq!(spell("<|x y|>"), "<|x\u{120}y|>");
        assert_eq!(spell("\u{120}hello"), "\u{120}hello");
        assert_eq!(split_regex("llama-bpe"), Some(PreSplit::Regex(&[LLAMA3])));
        assert_eq!(split_regex("glm4"), Some(PreSplit::Regex(&[LLAMA3])));
        assert_eq!(split_regex("deepseek-v3"), Some(PreSplit::Regex(&DEEPSEEK_V3)));
        assert_eq!(split_regex("default"), Some(PreSplit::Gpt2));
        assert_eq!(split_regex("some-new-model"), None);
    }

    /// `text`'s pieces after `split`'s pre-tokenizer, in GPT-2's byte alphabet.
    fn pieces(split: PreSplit, text: &str) -> Vec<String> {
        use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
        let pre = pre_tokenizer(split).expect("the regexes compile");
        let mut s = PreTokenizedString::from(text);
        pre.pre_tokenize(&mut s).expect("splits");
        s.get_splits(OffsetReferential::Original, OffsetType::Byte).into_iter().map(|(p, _, _)| p.to_string()).collect()
    }

    #[test]
    fn deepseek_v3_splits_digits_in_threes_cjk_runs_and_letters_after_punctuation() {
        let pieces = pieces(PreSplit::Regex(&DEEPSEEK_V3), "Hi,there 1234567 日本語テキストです\n\n  x.y");
        // (What the `tokenizers` Python package gives with DeepSeek V3's tokenizer.json splits.)
        let want = ["Hi", ",there", "Ġ", "123", "456", "7", "Ġ", "æĹ¥æľ¬èªŀãĥĨãĤŃãĤ¹ãĥĪãģ§ãģĻ", "ĊĊ", "Ġ", "Ġx", ".y"];
        assert_eq!(pieces, want);
    }

    #[test]
    fn kimi_k2_keeps_han_runs_apart_from_other_letters() {
        let pieces = pieces(PreSplit::Regex(&[KIMI_K2]), "Hello中文World's ÉCOLE日本語テキスト 12345\n\n  x.y");
        // (Python's `regex` module, V1 sets, over tokenization_kimi.py's pattern, in GPT-2's alphabet.)
        let want = [
            "Hello",
            "ä¸Ńæĸĩ",
            "World's",
            "ĠÃīCOLE",
            "æĹ¥æľ¬èªŀ",
            "ãĥĨãĤŃãĤ¹ãĥĪ",
            "Ġ",
            "123",
            "45",
            "ĊĊ",
            "Ġ",
            "Ġx",
            ".y",
        ];
        assert_eq!(pieces, want);
    }
}
