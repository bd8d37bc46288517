//! Output files, below every command that writes one (`cli`'s outputs, `serve --trace`):
//! refusing a path that would replace what the run reads ([`clobber`]: the input, the
//! model) and writing a file whole or not at all ([`outfile`]), with the early check that
//! a path can be written at all ([`outfile::check_writable`]: a missing directory, a
//! directory).
pub mod clobber;
pub mod outfile;
