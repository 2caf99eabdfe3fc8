/// @file topo/detail/xml.hpp
/// A small strict XML reader for the subset NCCL writes (NCCL_TOPO_FILE / NCCL_GRAPH_FILE):
/// elements with quoted attributes, comments, an optional `<?xml ...?>` declaration, whitespace
/// between elements. Anything else (text content, CDATA, DOCTYPE, unknown entities, mismatched or
/// unclosed tags, duplicate attributes) is rejected with collx::error(errc::invalid_argument) whose
/// message names the source, line and column ("file.xml:12:5: ..."). Line and column are 1-based;
/// the column counts bytes.
///
/// Why not a library: the subset is tiny, the messages must name line and column, and the core must
/// stay header-only with no dependency (pugixml reports byte offsets only and needs linking).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <collx/error.hpp>

namespace collx {
inline namespace v0 {
namespace topo {
namespace detail {

/// A position in a text: 1-based line and column (bytes).
struct text_pos {
  int line = 1;
  int col = 1;
};

/// `message` fit for a terminal: bytes outside printable ASCII as \xNN (a message quotes the input,
/// which may be binary) and a backslash as \\ (so that "\x41" in the input stays apart from an
/// escaped byte), cut after `most` bytes with "..." (it may quote a megabyte line).
inline std::string printable(std::string_view message, std::size_t most = 500) {
  std::string out;
  for (const char ch : message) {
    if (out.size() >= most) return out + "...";
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else {
      const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

/// Throws collx::error(invalid_argument) "source:line:col: message" (printable: quoted input
/// escaped and cut short).
[[noreturn]] inline void fail_at(std::string_view source, text_pos p, const std::string& message) {
  COLLX_THROW(errc::invalid_argument, printable(std::string(source.empty() ? "<input>" : source) + ":" + std::to_string(p.line) +
                                                ":" + std::to_string(p.col) + ": " + message));
}

/// `text` without a leading UTF-8 byte order mark (files saved by Windows editors): every reader
/// starts with it, so line 1 column 1 is the first character a person sees.
/// @throws collx::error(invalid_argument) for UTF-16 or UTF-32 text (a byte order mark, or NUL
///   bytes between the first characters; what PowerShell's `>` writes), saying how to convert
///   it: every byte of the files these readers read is ASCII. (A stray NUL is the reader's own
///   error, at its line and column.)
inline std::string_view utf8_text(std::string_view text, std::string_view source) {
  const bool utf16_bom = text.substr(0, 2) == "\xFF\xFE" || text.substr(0, 2) == "\xFE\xFF";
  const std::string_view head = text.substr(0, 64);
  const auto nuls = static_cast<std::size_t>(std::count(head.begin(), head.end(), '\0'));
  if (utf16_bom || (nuls >= 4 && nuls * 4 >= head.size()))
    COLLX_THROW(errc::invalid_argument,
                std::string(source.empty() ? "<input>" : source) +
                    ": the text is UTF-16 or UTF-32 (" + (utf16_bom ? "a byte order mark" : "NUL bytes between characters") +
                    "; PowerShell's > writes it), not UTF-8 or ASCII: convert it first, e.g. iconv -f UTF-16 -t UTF-8 "
                    "FILE > FILE.txt, or save it with Out-File -Encoding ascii");
  return text.substr(0, 3) == "\xEF\xBB\xBF" ? text.substr(3) : text;
}

/// Where the line that starts at `from` ends (`end`: its terminator, or text.size()) and where the
/// next one starts (`next`; text.size() + 1 after the last line). A terminator is LF, CRs then LF
/// (Windows), or a CR of a run that no LF ends (one line per CR, as classic Mac editors save): the
/// text readers split every file alike. `cr_run_end` (start it at 0, pass it to every call over
/// one text) keeps where the current run of CRs ends, so a long run is scanned once, not per line.
struct line_span {
  std::size_t end;   ///< the terminator's first byte, or text.size()
  std::size_t next;  ///< where the next line starts
};
/// Whether the CR at text[i] ends a line by itself (its run of CRs is not followed by LF);
/// `cr_run_end` as line_at's.
inline bool lone_cr(std::string_view text, std::size_t i, std::size_t& cr_run_end) noexcept {
  if (cr_run_end <= i) {
    cr_run_end = i;
    while (cr_run_end < text.size() && text[cr_run_end] == '\r') ++cr_run_end;
  }
  return cr_run_end == text.size() || text[cr_run_end] != '\n';
}
inline line_span line_at(std::string_view text, std::size_t from, std::size_t& cr_run_end) noexcept {
  const std::size_t e = text.find_first_of("\r\n", from);
  if (e == std::string_view::npos) return {text.size(), text.size() + 1};
  if (text[e] == '\n' || lone_cr(text, e, cr_run_end)) return {e, e + 1};
  return {e, cr_run_end + 1};  // CRs then LF: one terminator
}

/// One attribute and where its name starts.
struct xml_attribute {
  std::string name;
  std::string value;
  text_pos pos;
};

/// One element, where its `<` is, its attributes and its child elements.
struct xml_element {
  std::string name;
  text_pos pos;
  std::vector<xml_attribute> attributes;
  std::vector<xml_element> children;

  /// The attribute called `n`, or nullptr.
  const xml_attribute* find(std::string_view n) const noexcept {
    for (const xml_attribute& a : attributes)
      if (a.name == n) return &a;
    return nullptr;
  }
};

/// Levels of elements parse_xml accepts, the root's included: NCCL's topology and graph files
/// nest about 6 deep; the bound keeps the recursive reader off the end of the stack.
inline constexpr int max_xml_depth = 64;

/// Parses `text` into its root element. @throws collx::error(invalid_argument) naming
/// `source:line:col` for anything outside the subset described above, and for elements nested
/// more than max_xml_depth levels deep.
inline xml_element parse_xml(std::string_view text, std::string_view source) {
  struct parser {
    std::string_view s;
    std::string_view src;
    std::size_t i = 0;
    text_pos p;
    std::size_t cr_run_end = 0;  // lone_cr's memory of the current run of CRs

    bool at_end() const { return i >= s.size(); }
    char peek(std::size_t k = 0) const { return i + k < s.size() ? s[i + k] : '\0'; }
    void advance() {
      // Lines as line_at counts them.
      if (s[i] == '\n' || (s[i] == '\r' && lone_cr(s, i, cr_run_end))) ++p.line, p.col = 1;
      else ++p.col;
      ++i;
    }
    bool starts(std::string_view t) const { return s.substr(i, t.size()) == t; }
    void skip(std::size_t n) { while (n-- && !at_end()) advance(); }
    static bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
    void skip_space() { while (!at_end() && space(s[i])) advance(); }
    static bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
    static bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.'; }
    [[noreturn]] void fail(const std::string& m) const { fail_at(src, p, m); }
    [[noreturn]] void fail(text_pos q, const std::string& m) const { fail_at(src, q, m); }

    std::string name() {
      if (at_end() || !name_start(s[i])) fail(at_end() ? "unexpected end of input, expected a name" : "expected a name, found '" + std::string(1, s[i]) + "'");
      const std::size_t b = i;
      while (!at_end() && name_char(s[i])) advance();
      return std::string(s.substr(b, i - b));
    }

    // Skips whitespace and comments (and the declaration when allowed).
    void skip_misc(bool allow_decl) {
      for (;;) {
        skip_space();
        if (starts("<!--")) {
          const text_pos q = p;
          skip(4);
          while (!at_end() && !starts("-->")) advance();
          if (at_end()) fail(q, "comment not closed");
          skip(3);
        } else if (starts("<?")) {
          if (!allow_decl || !starts("<?xml")) fail("processing instruction not allowed here");
          const text_pos q = p;
          while (!at_end() && !starts("?>")) advance();
          if (at_end()) fail(q, "XML declaration not closed");
          skip(2);
          allow_decl = false;
        } else if (starts("<!")) {
          fail("DOCTYPE and CDATA are not supported");
        } else {
          return;
        }
      }
    }

    std::string value() {
      const char q = peek();
      if (q != '"' && q != '\'') fail("expected a quoted attribute value");
      advance();
      std::string out;
      for (;;) {
        if (at_end()) fail("attribute value not closed");
        const char c = s[i];
        if (c == q) { advance(); return out; }
        if (c == '<') fail("'<' in an attribute value");
        if (c == '&') {
          const text_pos at = p;
          const std::size_t semi = s.find(';', i);
          if (semi == std::string_view::npos || semi - i > 10) fail(at, "bad entity reference");
          const std::string_view e = s.substr(i + 1, semi - i - 1);
          if (e == "amp") out += '&';
          else if (e == "lt") out += '<';
          else if (e == "gt") out += '>';
          else if (e == "quot") out += '"';
          else if (e == "apos") out += '\'';
          else if (e.size() > 1 && e[0] == '#') {
            unsigned long v = 0;
            const bool hex = e[1] == 'x';
            for (std::size_t k = hex ? 2 : 1; k < e.size(); ++k) {
              const char d = e[k];
              int dv;
              if (d >= '0' && d <= '9') dv = d - '0';
              else if (hex && d >= 'a' && d <= 'f') dv = d - 'a' + 10;
              else if (hex && d >= 'A' && d <= 'F') dv = d - 'A' + 10;
              else fail(at, "bad character reference &" + std::string(e) + ";");
              v = v * (hex ? 16 : 10) + static_cast<unsigned long>(dv);
            }
            if (v == 0 || v > 127) fail(at, "only ASCII character references are supported");
            out += static_cast<char>(v);
          } else {
            fail(at, "unknown entity &" + std::string(e) + ";");
          }
          while (i <= semi) advance();
          continue;
        }
        out += c;
        advance();
      }
    }

    // An element and its children; `depth` = elements it sits in (the recursion is bounded).
    xml_element element(int depth = 0) {
      xml_element e;
      e.pos = p;
      if (depth >= max_xml_depth)
        fail("elements nested more than " + std::to_string(max_xml_depth) + " levels deep (NCCL's files nest about 6)");
      if (peek() != '<') fail(at_end() ? "unexpected end of input" : "expected '<'");
      advance();
      e.name = name();
      for (;;) {
        const bool had_space = !at_end() && space(s[i]);
        skip_space();
        if (at_end()) fail(e.pos, "element <" + e.name + "> not closed");
        if (starts("/>")) { skip(2); return e; }
        if (peek() == '>') { advance(); break; }
        if (!had_space) fail("expected whitespace before an attribute");
        xml_attribute a;
        a.pos = p;
        a.name = name();
        if (e.find(a.name)) fail(a.pos, "duplicate attribute '" + a.name + "'");
        skip_space();
        if (peek() != '=') fail("expected '=' after attribute '" + a.name + "'");
        advance();
        skip_space();
        a.value = value();
        e.attributes.push_back(std::move(a));
      }
      for (;;) {
        skip_misc(false);
        if (at_end()) fail(e.pos, "element <" + e.name + "> not closed");
        if (starts("</")) {
          const text_pos q = p;
          skip(2);
          const std::string n = name();
          if (n != e.name) fail(q, "</" + n + "> closes <" + e.name + "> opened at line " + std::to_string(e.pos.line));
          skip_space();
          if (peek() != '>') fail("expected '>'");
          advance();
          return e;
        }
        if (peek() == '<') {
          e.children.push_back(element(depth + 1));
          continue;
        }
        fail("unexpected text '" + std::string(1, s[i]) + "' (text content is not part of this format)");
      }
    }
  };
  parser ps{text, source, 0, text_pos{}};
  if (ps.starts("\xEF\xBB\xBF")) ps.i = 3;  // UTF-8 byte order mark
  ps.skip_misc(true);
  if (ps.at_end()) ps.fail("no XML element found");
  xml_element root = ps.element();
  ps.skip_misc(false);
  if (!ps.at_end()) ps.fail("content after the root element");
  return root;
}

}  // namespace detail
}  // namespace topo
}  // namespace v0
}  // namespace collx
