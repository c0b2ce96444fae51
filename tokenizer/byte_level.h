// Byte-level helpers for GPT-2 style BPE tokenizers (used by tokenizer/tokenizer.cc): the reversible
// byte <-> character alphabet and the UTF-8 utilities the tokenizer needs.
//
// The byte-level alphabet gives every byte a visible code point: bytes that are printable Latin-1
// characters ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves, and the remaining 68
// bytes (controls, space, U+007F..U+00A0, U+00AD), in increasing order, take U+0100, U+0101, ...
// So a space becomes 'Ġ' (U+0120) and a newline 'Ċ' (U+010A).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace mtpspec::tokenizer_internal {

// Debian's Abseil has its own absl::string_view, which does not convert from std::string_view; use
// this for absl::StrCat arguments and absl::flat_hash_map lookups.
inline absl::string_view AbslView(std::string_view text) { return absl::string_view(text.data(), text.size()); }

// Appends, for every byte of `bytes`, the UTF-8 encoding of its byte-level character.
void AppendByteLevel(std::string_view bytes, std::string* out);

// Appends to `out` the bytes that the characters of `token` stand for. Returns false, leaving
// `out` unchanged, if `token` is not valid UTF-8 or has a character outside the alphabet.
bool AppendBytesFromByteLevel(std::string_view token, std::string* out);

// Scans one UTF-8 sequence starting at `text[pos]` (pos < text.size()). Sets `*valid` and returns
// the number of bytes it covers: the whole sequence if well formed, otherwise the length of the
// maximal ill-formed subpart (at least 1), as the Unicode standard recommends for U+FFFD
// substitution.
size_t ScanUtf8(std::string_view text, size_t pos, bool* valid);

// Offset of the first byte that does not start a well-formed UTF-8 sequence, or npos.
size_t FindInvalidUtf8(std::string_view text);

// Decodes `bytes` as UTF-8, replacing every maximal ill-formed subpart by U+FFFD. This is what
// Python's bytes.decode("utf-8", errors="replace") and Rust's String::from_utf8_lossy return.
std::string Utf8Lossy(std::string_view bytes);

// Code point of the (well-formed) UTF-8 sequence at `text[*pos]`; advances `*pos` past it.
uint32_t DecodeUtf8At(std::string_view text, size_t* pos);

// True for the code points with the Unicode White_Space property (Rust's char::is_whitespace and
// the `\s` of its regex crate, which HF uses for the lstrip / rstrip of added tokens).
bool IsUnicodeWhitespace(uint32_t code_point);

}  // namespace mtpspec::tokenizer_internal
