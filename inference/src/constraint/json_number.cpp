// Bounded JSON numbers as exact grammars over their decimal text (json_number.hpp).
//
// A number x within [lo, hi] is split by sign: x >= 0 has its magnitude in [max(lo, 0), hi];
// x < 0 is "-" and a magnitude in (max(-hi, 0), -lo] (never "-0"). A magnitude range is
// written digit by digit: the integer part as ranges of digit strings of each length (the
// usual digit-range construction), the fraction as a walk along the bounds' fraction digits
// that stays "tight" against a bound while it copies the bound's digits and is free once a
// digit differs (FracRange). All the arithmetic is on digit strings: bounds of any size are
// exact, and nothing is rounded through a double.
#include "constraint/json_number.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <tuple>

#include <boost/json.hpp>

namespace weir::inference::constraint {

namespace json = boost::json;

namespace {

// --- decimals as digit strings ----------------------------------------------------------------

// A non-negative decimal: integer digits without leading zeros ("0" for zero), fraction digits
// without trailing zeros.
struct Dec {
  std::string i = "0";
  std::string f;
};

int cmp_int(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : a == b ? 0 : 1;
}

int cmp(const Dec& a, const Dec& b) {
  if (int c = cmp_int(a.i, b.i)) return c;
  const std::size_t n = std::max(a.f.size(), b.f.size());
  for (std::size_t k = 0; k < n; ++k) {
    const char x = k < a.f.size() ? a.f[k] : '0', y = k < b.f.size() ? b.f[k] : '0';
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

std::string inc(std::string s) {
  for (std::size_t k = s.size(); k-- > 0;) {
    if (s[k] != '9') {
      ++s[k];
      return s;
    }
    s[k] = '0';
  }
  return "1" + s;
}

// REQUIRES: s != "0".
std::string dec(std::string s) {
  for (std::size_t k = s.size(); k-- > 0;) {
    if (s[k] != '0') {
      --s[k];
      break;
    }
    s[k] = '9';
  }
  if (s.size() > 1 && s[0] == '0') s.erase(0, 1);
  return s;
}

// The decimal a JSON number is written as: integers exactly, a double as its shortest form.
// Errors (nullopt): not finite.
std::optional<std::pair<bool, Dec>> decimal_of(const json::value& v, std::string& text) {
  std::string digits;
  int point = 0;  // digits before the decimal point
  bool negative = false;
  if (v.is_int64() || v.is_uint64()) {
    std::uint64_t m = 0;
    if (v.is_uint64()) {
      m = v.as_uint64();
    } else {
      const std::int64_t x = v.as_int64();
      negative = x < 0;
      m = negative ? 0 - static_cast<std::uint64_t>(x) : static_cast<std::uint64_t>(x);
    }
    text = (negative ? "-" : "") + std::to_string(m);
    digits = std::to_string(m);
    point = static_cast<int>(digits.size());
  } else {
    const double d = v.as_double();
    if (!std::isfinite(d)) return std::nullopt;
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
    text.assign(buf, end);
    std::string_view t = text;
    if (!t.empty() && t[0] == '-') negative = true, t.remove_prefix(1);
    int exp = 0;
    if (auto e = t.find('e'); e != std::string_view::npos) {
      std::from_chars(t.data() + e + (t[e + 1] == '+' ? 2 : 1), t.data() + t.size(), exp);
      t = t.substr(0, e);
    }
    const auto dot = t.find('.');
    point = static_cast<int>(dot == std::string_view::npos ? t.size() : dot) + exp;
    for (char c : t)
      if (c != '.') digits += c;
  }
  Dec r;
  if (point <= 0) {
    r.i = "0";
    r.f = std::string(static_cast<std::size_t>(-point), '0') + digits;
  } else if (point >= static_cast<int>(digits.size())) {
    r.i = digits + std::string(static_cast<std::size_t>(point) - digits.size(), '0');
  } else {
    r.i = digits.substr(0, static_cast<std::size_t>(point));
    r.f = digits.substr(static_cast<std::size_t>(point));
  }
  r.i.erase(0, std::min(r.i.find_first_not_of('0'), r.i.size() - 1));
  while (!r.f.empty() && r.f.back() == '0') r.f.pop_back();
  if (r.i == "0" && r.f.empty()) negative = false;  // -0 is 0
  return std::make_pair(negative, r);
}

Dec magnitude(const NumberBound& b) {
  return {b.int_digits, b.frac_digits};
}

// --- grammars ---------------------------------------------------------------------------------

// One side of zero: magnitudes within [lo, hi] (hi: none means unbounded).
struct Range {
  Dec lo;
  bool lo_excl = false;
  std::optional<Dec> hi;
  bool hi_excl = false;
};

struct Writer {
  GrammarBuilder& b;
  Sym digit;
  std::map<int, Sym> any_;  // any(k): exactly k digits

  explicit Writer(GrammarBuilder& builder) : b(builder) {
    std::bitset<256> d;
    for (char c = '0'; c <= '9'; ++c) d.set(static_cast<unsigned char>(c));
    digit = b.byte_class(d);
  }

  Sym digits_between(char lo, char hi) {
    std::bitset<256> d;
    for (char c = lo; c <= hi; ++c) d.set(static_cast<unsigned char>(c));
    return b.byte_class(d);
  }

  // Exactly k digits, as a chain of rules in tail position (the parse stack stays flat).
  Seq any(int k) {
    if (k <= 0) return {};
    if (k <= 4) return Seq(static_cast<std::size_t>(k), digit);
    auto it = any_.find(k);
    if (it == any_.end()) {
      Seq q = {digit};
      const Seq rest = any(k - 1);
      q.insert(q.end(), rest.begin(), rest.end());
      it = any_.emplace(k, b.group({q}, "digits")).first;
    }
    return {it->second};
  }

  // Digit strings of x's length within [x, y] (equal lengths; leading zeros are digits here).
  void fixed(const std::string& x, const std::string& y, Seq prefix, std::vector<Seq>& out) {
    if (x.empty()) {
      out.push_back(std::move(prefix));
      return;
    }
    const std::string xr = x.substr(1), yr = y.substr(1);
    const bool lo_free = xr.find_first_not_of('0') == std::string::npos;
    const bool hi_free = yr.find_first_not_of('9') == std::string::npos;
    if (x[0] == y[0] && !(lo_free && hi_free)) {
      prefix.push_back(b.byte(static_cast<unsigned char>(x[0])));
      fixed(xr, yr, std::move(prefix), out);
      return;
    }
    const char first = lo_free ? x[0] : static_cast<char>(x[0] + 1);
    const char last = hi_free ? y[0] : static_cast<char>(y[0] - 1);
    if (!lo_free) {
      Seq q = prefix;
      q.push_back(b.byte(static_cast<unsigned char>(x[0])));
      fixed(xr, std::string(xr.size(), '9'), q, out);
    }
    if (first <= last) {
      Seq q = prefix;
      q.push_back(digits_between(first, last));
      const Seq rest = any(static_cast<int>(xr.size()));
      q.insert(q.end(), rest.begin(), rest.end());
      out.push_back(std::move(q));
    }
    if (!hi_free) {
      Seq q = prefix;
      q.push_back(b.byte(static_cast<unsigned char>(y[0])));
      fixed(std::string(yr.size(), '0'), yr, q, out);
    }
  }

  // Integer digit strings (no leading zeros) within [lo, hi]; hi none: up to `cap` digits.
  std::vector<Seq> integers(std::string lo, const std::optional<std::string>& hi, int cap) {
    std::vector<Seq> out;
    if (hi && cmp_int(lo, *hi) > 0) return out;
    if (lo == "0") {
      out.push_back(b.literal("0"));
      if (hi && *hi == "0") return out;
      lo = "1";
    }
    const std::size_t last_len = hi ? hi->size() : std::max<std::size_t>(cap, lo.size());
    for (std::size_t len = lo.size(); len <= last_len; ++len) {
      const std::string from = len == lo.size() ? lo : "1" + std::string(len - 1, '0');
      const std::string to = hi && len == hi->size() ? *hi : std::string(len, '9');
      fixed(from, to, {}, out);
    }
    return out;
  }

  // Fraction digit strings F (1 to kMaxFractionDigits digits) with lo <= .F <= hi, where lo and
  // hi are fraction digit strings or none (no bound on that side). `lt` / `ht`: F's digits so
  // far are lo's / hi's; once one differs the rest is free on that side.
  struct Frac {
    std::optional<std::string> lo, hi;
    bool lo_excl = false, hi_excl = false;
  };
  Sym frac(const Frac& fr) {
    std::map<std::tuple<int, bool, bool>, Sym> memo;
    std::function<Sym(int, bool, bool)> at = [&](int i, bool lt, bool ht) -> Sym {
      const auto key = std::make_tuple(i, lt, ht);
      if (auto it = memo.find(key); it != memo.end()) return it->second;
      const auto n = static_cast<std::size_t>(i);
      std::vector<Seq> alts;
      if (!lt && !ht) {  // free: any digits up to the limit (at least one at the start)
        Sym s = b.repeat({digit}, i == 0 ? 1 : 0, kMaxFractionDigits - i);
        memo.emplace(key, s);
        return s;
      }
      // F ends here: equal to a tight bound's digits so far, then zeros.
      const bool end_lo = !lt || (n >= fr.lo->size() && !fr.lo_excl);
      const bool end_hi = !ht || n < fr.hi->size() || !fr.hi_excl;
      if (i > 0 && end_lo && end_hi) alts.push_back({});
      if (i < kMaxFractionDigits) {
        const char l = lt ? (n < fr.lo->size() ? (*fr.lo)[n] : '0') : '0';
        const char h = ht ? (n < fr.hi->size() ? (*fr.hi)[n] : '0') : '9';
        if (l <= h) {
          const char first = lt ? static_cast<char>(l + 1) : l;
          const char last = ht ? static_cast<char>(h - 1) : h;
          if (first <= last) alts.push_back({digits_between(first, last), at(i + 1, false, false)});
          if (lt && ht && l == h) {
            alts.push_back({b.byte(static_cast<unsigned char>(l)), at(i + 1, true, true)});
          } else {
            if (lt) alts.push_back({b.byte(static_cast<unsigned char>(l)), at(i + 1, true, false)});
            if (ht) alts.push_back({b.byte(static_cast<unsigned char>(h)), at(i + 1, false, true)});
          }
        }
      }
      Sym s = b.group(alts, "fraction");
      memo.emplace(key, s);
      return s;
    };
    return at(0, fr.lo.has_value(), fr.hi.has_value());
  }

  // "." F for any fraction, optional.
  Sym any_fraction() {
    Seq q = b.literal(".");
    q.push_back(b.repeat({digit}, 1, kMaxFractionDigits));
    return b.optional(q);
  }

  // One integer part `i` with its fraction: `bare` allows no fraction at all.
  Seq with_fraction(const std::string& i, bool bare, const Frac& fr) {
    Seq dot = b.literal(".");
    dot.push_back(frac(fr));
    Seq q = b.literal(i);
    q.push_back(bare ? b.optional(dot) : b.group({dot}, "fraction"));
    return q;
  }

  // Decimals (integer part and optional fraction) whose value lies in `r`.
  std::vector<Seq> numbers(const Range& r, int cap) {
    std::vector<Seq> out;
    const Dec& lo = r.lo;
    const bool lo_bare = lo.f.empty() && !r.lo_excl;  // lo.i itself is in range (from below)
    Frac from_lo{lo.f, std::nullopt, r.lo_excl, false};
    if (!r.hi) {
      out.push_back(with_fraction(lo.i, lo_bare, from_lo));
      for (Seq& q : integers(inc(lo.i), std::nullopt, cap)) {
        q.push_back(any_fraction());
        out.push_back(std::move(q));
      }
      return out;
    }
    const Dec& hi = *r.hi;
    const bool hi_bare = !(hi.f.empty() && r.hi_excl);  // hi.i itself is in range (from above)
    if (lo.i == hi.i) {
      out.push_back(with_fraction(lo.i, lo_bare && hi_bare, {lo.f, hi.f, r.lo_excl, r.hi_excl}));
      return out;
    }
    out.push_back(with_fraction(lo.i, lo_bare, from_lo));
    if (cmp_int(inc(lo.i), hi.i) < 0) {
      for (Seq& q : integers(inc(lo.i), dec(hi.i), cap)) {
        q.push_back(any_fraction());
        out.push_back(std::move(q));
      }
    }
    out.push_back(with_fraction(hi.i, hi_bare, {std::nullopt, hi.f, false, r.hi_excl}));
    return out;
  }
};

// The smallest integer in a range's lower end / the largest in its upper end.
std::string ceil_of(const Dec& lo, bool excl) {
  return lo.f.empty() && !excl ? lo.i : inc(lo.i);
}
std::optional<std::string> floor_of(const Dec& hi, bool excl) {
  if (!hi.f.empty() || !excl) return hi.i;
  if (hi.i == "0") return std::nullopt;  // below zero: none on this side
  return dec(hi.i);
}

// The smallest decimal of at most kMaxFractionDigits fraction digits in the range, compared
// with its upper end: whether the grammar has a number on this side.
bool has_decimal(const Range& r) {
  Dec t = r.lo;
  const auto n = static_cast<std::size_t>(kMaxFractionDigits);
  const bool exact = t.f.size() <= n;
  if (t.f.size() < n) t.f.resize(n, '0');
  t.f.resize(n);
  if (!exact || r.lo_excl) {  // the next one up
    std::string all = t.i + t.f;
    all = inc(all);
    t.i = all.substr(0, all.size() - n);
    t.f = all.substr(all.size() - n);
  }
  if (!r.hi) return true;
  const int c = cmp(t, *r.hi);
  return c < 0 || (c == 0 && !r.hi_excl);
}

struct Sides {
  std::optional<Range> pos, neg;
};

// The bounds split by sign (see the top of this file).
Sides sides_of(const NumberBounds& bd) {
  Sides s;
  const auto& lo = bd.lo;
  const auto& hi = bd.hi;
  if (!hi || !hi->negative) {
    Range r;
    if (lo && !lo->negative) r.lo = magnitude(*lo), r.lo_excl = lo->exclusive;
    if (hi) r.hi = magnitude(*hi), r.hi_excl = hi->exclusive;
    if (!r.hi || cmp(r.lo, *r.hi) < 0 || (cmp(r.lo, *r.hi) == 0 && !r.lo_excl && !r.hi_excl))
      s.pos = r;
  }
  if (!lo || lo->negative) {
    Range r;
    r.lo_excl = true;  // magnitude 0 is "-0": not on this side
    if (hi && hi->negative) r.lo = magnitude(*hi), r.lo_excl = hi->exclusive;
    if (lo) r.hi = magnitude(*lo), r.hi_excl = lo->exclusive;
    if (!r.hi || cmp(r.lo, *r.hi) < 0 || (cmp(r.lo, *r.hi) == 0 && !r.lo_excl && !r.hi_excl))
      s.neg = r;
  }
  return s;
}

std::string both(const NumberBounds& bd, const std::string& where) {
  std::string s;
  if (bd.lo) s += "'" + bd.lo->keyword + "' " + bd.lo->text;
  if (bd.lo && bd.hi) s += " and ";
  if (bd.hi) s += "'" + bd.hi->keyword + "' " + bd.hi->text;
  return s + " at " + where;
}

int digit_cap(const NumberBounds& bd) {
  int cap = kMaxIntegerDigits;
  for (const auto* b : {&bd.lo, &bd.hi})
    if (*b) cap = std::max(cap, static_cast<int>((*b)->int_digits.size()));
  return cap;
}

}  // namespace

Result<NumberBounds> number_bounds(const json::object& o, const std::string& where) {
  NumberBounds bd;
  auto read = [&](const char* k, bool exclusive) -> Result<std::optional<NumberBound>> {
    const json::value* v = o.if_contains(k);
    if (!v) return std::optional<NumberBound>{};
    if (!v->is_number())
      return Error(Errc::invalid_argument, "JSON Schema keyword '" + std::string(k) + "' at " +
                                               where + " must be a number");
    NumberBound b;
    b.keyword = k;
    b.exclusive = exclusive;
    auto d = decimal_of(*v, b.text);
    if (!d)
      return Error(Errc::invalid_argument,
                   "JSON Schema keyword '" + std::string(k) + "' at " + where + " is not finite");
    b.negative = d->first;
    b.int_digits = d->second.i;
    b.frac_digits = d->second.f;
    return std::optional<NumberBound>(std::move(b));
  };
  // The stricter of two bounds on one side: greater for a lower one, smaller for an upper one.
  auto stricter = [](std::optional<NumberBound> x, std::optional<NumberBound> y, bool lower) {
    if (!x) return y;
    if (!y) return x;
    auto value = [](const NumberBound& b) {  // sign-aware order: negative magnitudes reversed
      return std::make_pair(b.negative, Dec{b.int_digits, b.frac_digits});
    };
    const auto [xn, xd] = value(*x);
    const auto [yn, yd] = value(*y);
    int c = xn != yn ? (xn ? -1 : 1) : (xn ? -cmp(xd, yd) : cmp(xd, yd));
    if (c == 0) return x->exclusive ? x : y;
    return (c > 0) == lower ? x : y;
  };
  for (auto [inc_k, exc_k, lower] : {std::make_tuple("minimum", "exclusiveMinimum", true),
                                     std::make_tuple("maximum", "exclusiveMaximum", false)}) {
    auto a = read(inc_k, false);
    if (!a) return std::move(a).error();
    auto e = read(exc_k, true);
    if (!e) return std::move(e).error();
    (lower ? bd.lo : bd.hi) = stricter(std::move(*a), std::move(*e), lower);
  }
  return bd;
}

Sym integer_in(GrammarBuilder& b, const NumberBounds& bd, const std::string& where) {
  const Sides s = sides_of(bd);
  if (!s.pos && !s.neg)
    return b.never(both(bd, where) + " contradict each other (no number lies between them)");
  Writer w(b);
  const int cap = digit_cap(bd);
  std::vector<Seq> alts;
  if (s.pos) {
    const auto hi = s.pos->hi ? floor_of(*s.pos->hi, s.pos->hi_excl) : std::optional<std::string>();
    if (!s.pos->hi || hi) {
      for (Seq& q : w.integers(ceil_of(s.pos->lo, s.pos->lo_excl), hi, cap))
        alts.push_back(std::move(q));
    }
  }
  if (s.neg) {
    const auto hi = s.neg->hi ? floor_of(*s.neg->hi, s.neg->hi_excl) : std::optional<std::string>();
    if (!s.neg->hi || hi) {
      std::vector<Seq> mags = w.integers(ceil_of(s.neg->lo, s.neg->lo_excl), hi, cap);
      if (!mags.empty()) {
        Seq q = b.literal("-");
        q.push_back(b.group(mags, "negative"));
        alts.push_back(std::move(q));
      }
    }
  }
  if (alts.empty()) return b.never(both(bd, where) + " leave no integer between them");
  return b.group(alts, "integer");
}

Sym number_in(GrammarBuilder& b, const NumberBounds& bd, const std::string& where) {
  const Sides s = sides_of(bd);
  if (!s.pos && !s.neg)
    return b.never(both(bd, where) + " contradict each other (no number lies between them)");
  if (!(s.pos && has_decimal(*s.pos)) && !(s.neg && has_decimal(*s.neg)))
    return b.never(both(bd, where) + " leave no number of at most " +
                   std::to_string(kMaxFractionDigits) +
                   " fraction digits (the limit of weir's number grammar)");
  Writer w(b);
  const int cap = digit_cap(bd);
  std::vector<Seq> alts;
  if (s.pos && has_decimal(*s.pos)) alts = w.numbers(*s.pos, cap);
  if (s.neg && has_decimal(*s.neg)) {
    Seq q = b.literal("-");
    q.push_back(b.group(w.numbers(*s.neg, cap), "negative"));
    alts.push_back(std::move(q));
  }
  return b.group(alts, "number");
}

}  // namespace weir::inference::constraint
