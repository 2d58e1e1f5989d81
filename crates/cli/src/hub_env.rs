//! The hub's settings from the environment, as the Python client reads them: `HF_ENDPOINT`,
//! `HF_TOKEN` (else the file `HF_TOKEN_PATH` or `HF_HOME/token`), `HF_HUB_CACHE` (else
//! `HF_HOME/hub`, else `~/.cache/huggingface/hub`), `HF_HUB_OFFLINE`, and `HTTPS_PROXY` /
//! `HTTP_PROXY` for the endpoint's scheme.

use std::env::var_os;
use std::path::PathBuf;
use tf_hub::{DEFAULT_ENDPOINT, HubConfig, Token};

/// The hub configuration the environment asks for.
pub fn hub_config() -> HubConfig {
    let home = var_os("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
        let xdg = var_os("XDG_CACHE_HOME").map(PathBuf::from);
        xdg.unwrap_or_else(|| var_os("HOME").map(PathBuf::from).unwrap_or_default().join(".cache")).join("huggingface")
    });
    let cache_dir = var_os("HF_HUB_CACHE").map(PathBuf::from).unwrap_or_else(|| home.join("hub"));
    let endpoint = text("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
    let token_file = var_os("HF_TOKEN_PATH").map(PathBuf::from).unwrap_or_else(|| home.join("token"));
    let token = text("HF_TOKEN").or_else(|| std::fs::read_to_string(token_file).ok()).and_then(Token::new);
    let offline =
        text("HF_HUB_OFFLINE").is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "on" | "yes" | "true"));
    let proxy = if endpoint.starts_with("https:") {
        text("HTTPS_PROXY").or_else(|| text("https_proxy"))
    } else {
        text("HTTP_PROXY").or_else(|| text("http_proxy"))
    };
    HubConfig { endpoint, token, cache_dir, offline, proxy, ..HubConfig::new(PathBuf::new()) }
}

/// A variable's value when set, valid UTF-8 and not blank.
fn text(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}
