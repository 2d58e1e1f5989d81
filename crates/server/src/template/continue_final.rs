//! `continue_final_message`: a rendered chat cut right after its final message's text, so the
//! model continues that message (a prefill of its reply) instead of a new turn; the cut
//! transformers' `apply_chat_template` makes.

/// `rendered` cut after the last place the final message's text `content` appears: after its
/// text without leading whitespace where the template kept it whole, else after its trimmed
/// text (a template that trims the message). `Err` says why it cannot be cut.
pub fn cut<'a>(rendered: &'a str, content: &str) -> Result<&'a str, String> {
    let trimmed = content.trim();
    if trimmed.is_empty() {
        return Err("the final message has no text to continue".into());
    }
    let Some(at) = rendered.rfind(trimmed) else {
        return Err("the final message's text does not appear in the rendered chat".into());
    };
    let whole = content.trim_start();
    let end = match rendered.get(at..at + whole.len()) {
        Some(s) if s == content => at + whole.len(),
        _ => at + trimmed.len(),
    };
    Ok(&rendered[..end])
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn the_final_message_is_left_open() {
        let r = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHello there<|im_end|>\n";
        assert_eq!(cut(r, "Hello there"), Ok("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHello there"));
        // Trailing spaces the template kept stay; ones it trimmed are not asked back.
        let kept = "A: Hi \nB: x";
        assert_eq!(cut(kept, "Hi "), Ok("A: Hi "));
        assert_eq!(cut("A: Hi<end>", "Hi  "), Ok("A: Hi"));
        // Leading whitespace: cut after the trimmed text (the slice differs from the content).
        assert_eq!(cut("A:  Hi <end>", "  Hi "), Ok("A:  Hi"));
        // The last occurrence: a user turn repeating the text comes before it.
        assert_eq!(cut("U: ok\nA: ok<end>", "ok"), Ok("U: ok\nA: ok"));
    }

    #[test]
    fn text_that_is_missing_or_blank_is_refused() {
        assert!(cut("abc", "  ").is_err());
        assert!(cut("abc", "zz").is_err());
    }
}
