"""The currencies a price, a budget or a FOCUS ``BillingCurrency`` may be in: the active ISO 4217
codes. Three letters alone are not enough: ``RMB`` or ``YEN`` would pass, and the FOCUS export
would break FOCUS' rule that ``BillingCurrency`` is an ISO 4217 code (a mandatory rule of the
FinOps Foundation's validator)."""

from __future__ import annotations

#: Active ISO 4217 codes (ISO 4217 list one, with the funds and precious-metal codes it lists).
ISO_4217 = frozenset("""
AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BOV BRL BSD BTN BWP
BYN BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR
FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES
KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR
MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF
SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS
UAH UGX USD USN UYI UYU UYW UZS VED VES VND VUV WST XAF XAG XAU XBA XBB XBC XBD XCD XCG XDR XOF
XPD XPF XPT XSU XTS XUA XXX YER ZAR ZMW ZWG
""".split())


def currency_problem(code: str) -> str | None:
    """Why ``code`` (upper case) is no currency a bill may be in, or ``None`` when it is one."""
    if code in ISO_4217:
        return None
    return f"must be an ISO 4217 currency code such as USD or EUR, got {code!r}"
