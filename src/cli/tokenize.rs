//! `nanollm tokenize`: what a text becomes as token ids, with llama.cpp `llama-tokenize`'s
//! flags and output (`ID -> 'piece'` lines, `--ids` as a list, `--show-count`).
use crate::cli::output::write_stdout;
use crate::model::chat::{self, ChatOptions};
use crate::model::chat::{apply_chat, prompt_messages};
use crate::model::source;
use anyhow::{Context, Result};
use clap::Args;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

const AFTER_HELP: &str = "\
Examples:
  nanollm tokenize \"What is the capital of France?\"
  nanollm tokenize --ids --no-bos \"Hello world\"
  nanollm tokenize --chat --json \"Hi\"
  printf 'two\\nlines' | nanollm tokenize --show-count -

Output (as llama-tokenize): one line per token, `ID -> 'piece'`; --ids prints the ids as a
list `[1, 2, 3]`; --json writes {model, tokenizer, text, ids, pieces, count}. The BOS the
model asks for is added unless --no-bos, once: a text that starts with the BOS token (such
as <bos> on Gemma) keeps one, as `generate` and the server count it; control tokens written in the text (such as
<|im_start|>) map to their ids unless --no-parse-special. With --chat only the template's
markup does: the text is a message, data, and its control-token text stays plain text (as
`generate` sends it; with --no-parse-special the markup is plain text too). Only the
tokenizer is loaded.";

/// Arguments of `nanollm tokenize`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP, allow_negative_numbers = true)]
pub struct TokenizeArgs {
    /// The text; `-` reads it from stdin, byte for byte (no newline added or removed).
    pub text: String,
    /// A .gguf file, a Hugging Face model folder (tokenizer.json), or a hub id already in
    /// the local HF cache [default: SmolLM2-135M-Instruct Q4_1 in the nanollm cache].
    #[arg(long, short = 'm', value_name = "PATH|ORG/NAME")]
    pub model: Option<PathBuf>,
    /// Print only the token ids, as a list: [1, 2, 3].
    #[arg(long)]
    pub ids: bool,
    /// Do not add the BOS token, even when the model asks for one.
    #[arg(long)]
    pub no_bos: bool,
    /// Tokenize control-token text such as <|im_start|> as plain text, not as its id.
    #[arg(long)]
    pub no_parse_special: bool,
    /// Print the number of tokens after the tokens.
    #[arg(long)]
    pub show_count: bool,
    /// Write one JSON document (text, ids, pieces, count) to stdout.
    #[arg(long, conflicts_with = "ids")]
    pub json: bool,
    /// Apply the model's chat template first (the text as one user turn, ready for the
    /// assistant's answer), as `generate` does by default.
    #[arg(long)]
    pub chat: bool,
    /// System message for --chat.
    #[arg(long, value_name = "TEXT", requires = "chat")]
    pub system: Option<String>,
}

/// `text`'s ids as `generate` and the server count them ([`chat::encode_prompt`]: the
/// model's BOS added unless `no_bos`, not doubled when the text starts with its BOS token),
/// or with no BOS or EOS added.
fn encode(tokenizer: &crate::model::Tokenizer, text: &str, no_bos: bool) -> Result<Vec<u32>> {
    match no_bos {
        true => tokenizer.encode_with(text, false),
        false => chat::encode_prompt(tokenizer, text),
    }
}

/// Run `nanollm tokenize`.
pub fn run(args: TokenizeArgs) -> Result<ExitCode> {
    let text = read_text(&args.text)?;
    let path = source::resolve(args.model.as_deref())?;
    let files = source::load_tokenizer(&path)?;
    let mut tokenizer = files.tokenizer;
    tokenizer.set_parse_special(!args.no_parse_special);
    let (text, ids) = if args.chat {
        let template = files.chat_template.as_deref();
        let bos_eos = (files.bos_token.as_deref(), files.eos_token.as_deref());
        let system = args.system.as_deref();
        let rendered = apply_chat(template, bos_eos, &text, system)?;
        let ids = match template {
            // As `generate`: the template's markup is control, the text is data.
            Some(t) if !args.no_parse_special => chat::encode_messages_with(
                &tokenizer,
                t,
                &prompt_messages(&text, system),
                &ChatOptions::generation(bos_eos.0, bos_eos.1),
                !args.no_bos,
            )?,
            _ => encode(&tokenizer, &rendered, args.no_bos)?,
        };
        (rendered, ids)
    } else {
        let ids = encode(&tokenizer, &text, args.no_bos)?;
        (text, ids)
    };
    let pieces: Vec<String> = ids.iter().map(|&id| tokenizer.token_text(id)).collect();
    let mut out = String::new();
    if args.json {
        let doc = serde_json::json!({
            "model": path.display().to_string(),
            "tokenizer": tokenizer.kind.describe(),
            "text": text,
            "ids": ids,
            "pieces": pieces,
            "count": ids.len(),
        });
        out.push_str(&serde_json::to_string_pretty(&doc)?);
        out.push('\n');
    } else if args.ids {
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        out.push_str(&format!("[{}]\n", list.join(", ")));
    } else {
        for (id, piece) in ids.iter().zip(&pieces) {
            out.push_str(&format!("{id:6} -> '{piece}'\n"));
        }
    }
    if args.show_count && !args.json {
        out.push_str(&format!("Total number of tokens: {}\n", ids.len()));
    }
    write_stdout(&out)?;
    Ok(ExitCode::SUCCESS)
}

/// The text argument, or stdin's bytes for `-` (must be UTF-8).
fn read_text(arg: &str) -> Result<String> {
    if arg != "-" {
        return Ok(arg.to_string());
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .read_to_end(&mut bytes)
        .context("cannot read the text from stdin")?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "stdin is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}
