#include "tokenizer/byte_level.h"

#include <array>

namespace mtpspec::tokenizer_internal {
namespace {

// First code point past the byte-level alphabet: 256 + the 68 remapped bytes.
constexpr uint32_t kAlphabetEnd = 0x144;

bool StandsForItself(uint32_t byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
}

void AppendUtf8(uint32_t code_point, std::string* out) {
  if (code_point < 0x80) {
    out->push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

struct Alphabet {
  std::array<uint32_t, 256> char_of_byte{};          // byte -> code point
  std::array<int16_t, kAlphabetEnd> byte_of_char{};  // code point -> byte, -1 if not in the alphabet
};

const Alphabet& GetAlphabet() {
  static const Alphabet alphabet = [] {
    Alphabet a;
    a.byte_of_char.fill(-1);
    uint32_t next_extra = 256;
    for (uint32_t byte = 0; byte < 256; ++byte) {
      const uint32_t code_point = StandsForItself(byte) ? byte : next_extra++;
      a.char_of_byte[byte] = code_point;
      a.byte_of_char[code_point] = static_cast<int16_t>(byte);
    }
    return a;
  }();
  return alphabet;
}

}  // namespace

void AppendByteLevel(std::string_view bytes, std::string* out) {
  const Alphabet& alphabet = GetAlphabet();
  for (unsigned char byte : bytes) AppendUtf8(alphabet.char_of_byte[byte], out);
}

bool AppendBytesFromByteLevel(std::string_view token, std::string* out) {
  const Alphabet& alphabet = GetAlphabet();
  std::string bytes;
  bytes.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    bool valid = false;
    ScanUtf8(token, pos, &valid);
    if (!valid) return false;
    const uint32_t code_point = DecodeUtf8At(token, &pos);
    if (code_point >= kAlphabetEnd || alphabet.byte_of_char[code_point] < 0) return false;
    bytes.push_back(static_cast<char>(alphabet.byte_of_char[code_point]));
  }
  out->append(bytes);
  return true;
}

size_t ScanUtf8(std::string_view text, size_t pos, bool* valid) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  *valid = false;
  if (lead < 0x80) {
    *valid = true;
    return 1;
  }
  // Number of continuation bytes and the allowed range of the first one (which excludes overlong
  // forms, UTF-16 surrogates and code points above U+10FFFF).
  int continuation = 0;
  unsigned char low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    continuation = 1;
  } else if (lead == 0xE0) {
    continuation = 2;
    low = 0xA0;
  } else if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) {
    continuation = 2;
  } else if (lead == 0xED) {
    continuation = 2;
    high = 0x9F;
  } else if (lead == 0xF0) {
    continuation = 3;
    low = 0x90;
  } else if (lead >= 0xF1 && lead <= 0xF3) {
    continuation = 3;
  } else if (lead == 0xF4) {
    continuation = 3;
    high = 0x8F;
  } else {
    return 1;  // 0x80..0xC1, 0xF5..0xFF never start a sequence
  }
  size_t end = pos + 1;
  for (int k = 0; k < continuation; ++k, ++end) {
    if (end >= text.size()) return end - pos;
    const auto byte = static_cast<unsigned char>(text[end]);
    const bool in_range = k == 0 ? (byte >= low && byte <= high) : (byte >= 0x80 && byte <= 0xBF);
    if (!in_range) return end - pos;
  }
  *valid = true;
  return end - pos;
}

size_t FindInvalidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    bool valid = false;
    const size_t length = ScanUtf8(text, pos, &valid);
    if (!valid) return pos;
    pos += length;
  }
  return std::string_view::npos;
}

std::string Utf8Lossy(std::string_view bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    bool valid = false;
    const size_t length = ScanUtf8(bytes, pos, &valid);
    if (valid) {
      out.append(bytes.substr(pos, length));
    } else {
      out.append(kReplacement);
    }
    pos += length;
  }
  return out;
}

uint32_t DecodeUtf8At(std::string_view text, size_t* pos) {
  const auto lead = static_cast<unsigned char>(text[*pos]);
  int continuation = 0;
  uint32_t code_point = lead;
  if (lead >= 0xF0) {
    continuation = 3;
    code_point = lead & 0x07;
  } else if (lead >= 0xE0) {
    continuation = 2;
    code_point = lead & 0x0F;
  } else if (lead >= 0xC0) {
    continuation = 1;
    code_point = lead & 0x1F;
  }
  ++*pos;
  for (int k = 0; k < continuation && *pos < text.size(); ++k, ++*pos) {
    code_point = (code_point << 6) | (static_cast<unsigned char>(text[*pos]) & 0x3F);
  }
  return code_point;
}

bool IsUnicodeWhitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace mtpspec::tokenizer_internal
