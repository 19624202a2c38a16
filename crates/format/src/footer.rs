//! The framing of a compressed log's footer: a zstd skippable frame that
//! decoders pass over and readers find from the file's last 8 bytes.

/// The skippable-frame magic number carrying the footer of a compressed
/// log (zstd decoders skip it).
pub const FOOTER_FRAME_MAGIC: u32 = 0x184D_2A5E;
/// The tag ending a compressed log, after the footer frame's length.
pub const FOOTER_FRAME_TAG: &[u8; 4] = b"BJHF";

/// The footer of a compressed log as a zstd skippable frame: magic, size,
/// the footer line, then the frame's total length and a tag, so a reader
/// finds it from the last 8 bytes.
pub fn footer_frame(footer_line: &[u8]) -> Vec<u8> {
    let payload_len = footer_line.len() + 8;
    let total = 8 + payload_len;
    let mut frame = Vec::with_capacity(total);
    frame.extend_from_slice(&FOOTER_FRAME_MAGIC.to_le_bytes());
    frame.extend_from_slice(&(payload_len as u32).to_le_bytes());
    frame.extend_from_slice(footer_line);
    frame.extend_from_slice(&(total as u32).to_le_bytes());
    frame.extend_from_slice(FOOTER_FRAME_TAG);
    frame
}
