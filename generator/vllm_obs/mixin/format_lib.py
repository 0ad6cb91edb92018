"""lib/format.libsonnet: jsonnet renderings of numbers and durations that write exactly what the
generator's Python does (`promql.number`, `human_seconds`, `percent`, `{:g}`, `{:.2%}`...), by
rounding a number's 17 significant digits as decimal text (docs/design.md says why).
"""

FORMAT_LIBSONNET = r"""
// Renderings of numbers and durations identical to vllm-obs's own (Python), so that a rule or
// panel rebuilt from _config reads exactly as the generated files do. std.format rounds in
// floating point and gets the last digits wrong; std.toString prints 17 correctly rounded
// significant digits, so everything below rounds those digits as decimal text, and settles a
// digit string that looks like an exact tie by comparing the number with the tie exactly.

local ZEROS = '0000000000000000000000000000000000000000';
local zeros(n) =
  if n <= 0 then '' else if n <= std.length(ZEROS) then std.substr(ZEROS, 0, n)
  else std.join('', std.makeArray(n, function(i) '0'));
local digit(s, i) = std.codepoint(s[i]) - 48;
local find(s, c) =
  local go(i) = if i >= std.length(s) then -1 else if s[i] == c then i else go(i + 1);
  go(0);
local leadingZeros(s) =
  local go(i) = if i < std.length(s) && s[i] == '0' then go(i + 1) else i;
  go(0);
local trimZeros(s) =
  local go(n) = if n > 0 && s[n - 1] == '0' then go(n - 1) else n;
  std.substr(s, 0, go(std.length(s)));
local tail(s, from) = if from >= std.length(s) then '' else std.substr(s, from, std.length(s) - from);

// x > 0 as { x, d: significant digits without leading or trailing zeros, e: exponent }: x ~ 0.d * 10^e.
local decompose(x) =
  local s = std.toString(x);
  local ePos = find(s, 'e');
  local mantissa = if ePos < 0 then s else std.substr(s, 0, ePos);
  local exp10 = if ePos < 0 then 0 else std.parseInt(std.strReplace(tail(s, ePos + 1), '+', ''));
  local dot = find(mantissa, '.');
  local whole = if dot < 0 then mantissa else std.substr(mantissa, 0, dot);
  local all = whole + (if dot < 0 then '' else tail(mantissa, dot + 1));
  local lead = leadingZeros(all);
  { x: x, d: trimZeros(tail(all, lead)), e: std.length(whole) - lead + exp10 };

// Dekker's exact product: a * b == p + err exactly, in double arithmetic.
local split(a) = local c = 134217729 * a; local hi = c - (c - a); { hi: hi, lo: a - hi };
local twoProduct(a, b) =
  local p = a * b;
  local A = split(a);
  local B = split(b);
  { p: p, err: ((A.hi * B.hi - p) + A.hi * B.lo + A.lo * B.hi) + A.lo * B.lo };

// The sign of x - 0.t * 10^e (t: the digits of a tie), exact for ties between 1e-22 and 1e15.
// The tie is split into a high part of 15 digits and the rest, each product taken exactly.
local compareTie(x, t, e) =
  local s = std.length(t) - e;  // tie = int(t) / 10^s
  local low = std.max(std.length(t) - 15, 0);
  local high = std.parseInt(std.substr(t, 0, std.length(t) - low));
  local rest = if low == 0 then 0 else std.parseInt(tail(t, std.length(t) - low));
  if s > 22 then 0
  else if s <= 0 then (if low == 0 then std.sign(x - high * std.pow(10, -s)) else 0)
  else
    local scaled = twoProduct(x, std.pow(10, s));
    local tie = if low == 0 then { p: high, err: 0 } else twoProduct(high, std.pow(10, low));
    std.sign(((scaled.p - tie.p) - rest) + (scaled.err - tie.err));

// A string of decimal digits plus one ('199' -> '200', '99' -> '100').
local increment(s) =
  if s == '' then '1'
  else
    local last = digit(s, std.length(s) - 1);
    local head = std.substr(s, 0, std.length(s) - 1);
    if last == 9 then increment(head) + '0' else head + std.char(49 + last);

local zero = { x: 0, d: '', e: 0 };
local bump(n, keep, p) =
  local bumped = increment(keep);
  n { d: trimZeros(bumped), e: n.e + (if std.length(bumped) > p then 1 else 0) };
local truncate(n, keep) = if keep == '' then zero else n { d: trimZeros(keep) };

// n rounded to p significant digits (p >= 0): to nearest, ties to even, as C's printf.
local roundDigits(n, p) =
  if std.length(n.d) <= p then n
  else
    local keep = std.substr(n.d, 0, p);
    local next = digit(n.d, p);
    local looksTied = next == 5 && trimZeros(tail(n.d, p + 1)) == '';
    local side = if looksTied then compareTie(n.x, keep + '5', n.e) else 0;
    local odd = p > 0 && digit(keep, p - 1) % 2 == 1;
    local up = next > 5 || (next == 5 && (!looksTied || side > 0 || (side == 0 && odd)));
    if up then bump(n, keep, p) else truncate(n, keep);

// n rounded to `decimals` digits after the point.
local roundFixed(n, decimals) =
  local p = n.e + decimals;
  if n.d == '' || p < 0 then zero else roundDigits(n, p);

// n written without exponent: `decimals` digits after the point, or as many as it has (null).
local fixedText(n, decimals) =
  local whole = if n.e <= 0 || n.d == '' then '0' else std.substr(n.d + zeros(n.e - std.length(n.d)), 0, n.e);
  local fraction = zeros(-n.e) + tail(n.d, std.max(n.e, 0));
  local shown =
    if decimals == null then fraction
    else std.substr(fraction + zeros(decimals - std.length(fraction)), 0, decimals);
  whole + (if shown == '' then '' else '.' + shown);

// n as d.ddde+XX (Python's and C's exponent: a sign and at least two digits).
local scientific(n) =
  local exponent = n.e - 1;
  local magnitude = std.abs(exponent);
  n.d[0] + (if std.length(n.d) > 1 then '.' + tail(n.d, 1) else '') + 'e'
  + (if exponent < 0 then '-' else '+') + (if magnitude < 10 then '0' else '') + magnitude;

local signed(x, render) = if x < 0 then '-' + render(-x) else render(x);

// The fewest significant digits that read back as x, the nearer of two candidates first
// (Python's repr). More digits never read back worse, so a binary search finds the fewest.
local shortest(x) =
  local n = decompose(x);
  local readsBack(m) = std.parseJson('0.' + m.d + 'e' + m.e) == x;
  local candidate(p) =
    local keep = std.substr(n.d, 0, std.min(p, std.length(n.d)));
    local nearest = roundDigits(n, p);
    if readsBack(nearest) then nearest
    else if std.length(n.d) > p && readsBack(bump(n, keep, p)) then bump(n, keep, p)
    else if std.length(n.d) > p && readsBack(truncate(n, keep)) then truncate(n, keep)
    else null;
  local search(lo, hi) =
    if lo >= hi then candidate(lo)
    else
      local mid = std.floor((lo + hi) / 2);
      if candidate(mid) != null then search(lo, mid) else search(mid + 1, hi);
  search(1, std.max(std.length(n.d), 1));

{
  // Python's repr(float(x)): 0.05, 20.0, 1e-05.
  repr(x)::
    if x == 0 then '0.0'
    else signed(x, function(v)
      local n = shortest(v);
      if n.e < -3 || n.e > 16 then scientific(n)
      else
        local text = fixedText(n, null);
        if find(text, '.') >= 0 then text else text + '.0'),

  // promql.number: a threshold as PromQL text, 2 not 2.0, 0.05 not 5e-02.
  number(x)::
    local text = self.repr(x);
    if std.endsWith(text, '.0') then std.substr(text, 0, std.length(text) - 2) else text,

  // Python's '{:g}': six significant digits, trailing zeros dropped.
  g(x)::
    if x == 0 then '0'
    else signed(x, function(v)
      local n = roundDigits(decompose(v), 6);
      local exponent = n.e - 1;
      if exponent < -4 || exponent >= 6 then scientific(n) else fixedText(n, null)),

  // Python's '{:.Nf}'.
  fixed(x, decimals)::
    if x == 0 then fixedText(zero, decimals)
    else signed(x, function(v) fixedText(roundFixed(decompose(v), decimals), decimals)),

  // Python's round(x, decimals).
  round(x, decimals):: if x == 0 then 0 else std.parseJson(self.fixed(x, decimals)),

  // The alerts' renderings (rules/expressions.py): 200ms or 2s; 5%; and Python's '{:.N%}'.
  humanSeconds(x):: if x < 1 then self.g(x * 1000) + 'ms' else self.g(x) + 's',
  percent(x):: self.g(x * 100) + '%',
  fixedPercent(x, decimals):: self.fixed(x * 100, decimals) + '%',

  // The error budget of an objective, as the burn-rate rules write it.
  budget(objective):: self.round(1 - objective, 10),

  // promql.seconds, truncated to whole seconds: '1h30m' -> 5400.
  seconds(duration)::
    local units = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800, y: 31536000 };
    local n = std.length(duration);
    local isDigit(c) = c >= '0' && c <= '9';
    local step(i, total, number) =
      if i >= n then
        assert number == '' && n > 0 : "'%s' is not a Prometheus duration like 5m" % duration;
        total
      else if isDigit(duration[i]) then step(i + 1, total, number + duration[i])
      else
        local unit = if duration[i] == 'm' && i + 1 < n && duration[i + 1] == 's' then 'ms' else duration[i];
        assert number != '' && std.objectHas(units, unit) : "'%s' is not a Prometheus duration like 5m" % duration;
        step(i + std.length(unit), total + std.parseInt(number) * units[unit], '');
    std.floor(step(0, 0, '')),

  // dashboards/panels/queries.regex_literal: a regex matching exactly `text`, inside a PromQL string.
  regexLiteral(text)::
    std.join('', [
      if find('.+*?()|[]{}^$\\', c) >= 0 then std.strReplace('\\' + c, '\\', '\\\\') else c
      for c in std.stringChars(text)
    ]),

  // The extra matchers a dashboard appends after its own: ', namespace="llm"', or nothing.
  extraMatchers(selector)::
    local stripped = std.stripChars(selector, ' \t\n\r');
    if stripped == '' then '' else ', ' + stripped,
}
"""
