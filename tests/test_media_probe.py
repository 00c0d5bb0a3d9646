"""media_probe reads durations from real container headers and never raises.

The ``_FILES`` fixtures are real encoder output: ffmpeg 9 (libmp3lame, mp2,
aac, flac, libvorbis, libopus, libx264, libvpx, mpeg4) from the
imageio-ffmpeg wheel, run once when this file was written and embedded
zlib+base64, so no encoder is needed at test time. Each expected value was
checked against ffmpeg's own reading of the container and, where the two
agree on what "duration" means, against mutagen (``test_mutagen_agrees``).
The rest of the layouts (RF64 edge cases, VBRI, Ogg paging, MP4 64-bit boxes,
WebM SeekHead) are built by hand from the format specs.
"""

from __future__ import annotations

import base64
import io
import math
import struct
import time
import wave
import zlib

import pytest
from hypothesis import given, strategies as st

from aether_frame.core.media_probe import media_duration

AUDIO_TOKENS_PER_SECOND = 32  # Gemini's rate, as in costing.py

# name -> zlib+base64 of the file
_FILES = {
    "wav_s16.wav": (
        "eNrt0b1rE3EcBvDf3eXlktzdt9BNFBPQtTQN2CEghmIgGmptgoUSh2KJg61TqSg0bwVFR42DopOhUPClgy9T6ZShQ6q7QgRd"
        "C7/f3SWXt8uZ/8OHZ3l4hmf5LGfS6eIiYyupW1eLm1vRKcaYNMmV84xVLjMmsymWzeTyZyZ7ZjF9I5NL5/VJz65tFy8lZuIz"
        "8dk5xtbXttaikxfG7vnnwk39K7XIb9TDf/1VRsNEt2yu8xg/Elpnr++Nt33FUFIv0Sk9MpYiPwI1KTBSHLIaPMRvihX7sDd2"
        "d5TnakObJ5d+G0z7EqzKkvvL+WBZXOIWf2/9dJhbkT8HvUjbcGmeGtoLdUfx3MPeir0sQvwdJ0t2/KOq9D2wFHlonFKZkvrd"
        "0AOfN97r650jEeN3eMmc6xrDCvvjr4d9Rou+UVNPhDf8jL0cnHSS5jWe4EOx0Tk7KHvC1wpV9TfUppRhh1cDkvRs+LrbNGt8"
        "mj8WB/ZsvzQeKK4qtAI59MnYjywEZXl3dN8pWMdc4VHB7Ou9suvJF9ScppNHOuW1iypTKm62J9kxofBjXrA2nd2RJC8E9yMf"
        "DYduk9DG6lApj+P9A/uJmOZV3jRfdZ8OJWk1YIVTRpveUk0/CZm+indusNEZiQTP8KTZ6tQH8IAHPOABD3jAAx7wgAc84AEP"
        "eMADHvCABzzgAQ94wAMe8IAHPOABD3jAAx7wgAc84AEPeMADHvCABzzgAQ94wAMe8IAHPOABD3jAAx7wgAc84AEPeMADHvCA"
        "BzzgAQ94wAMe8IAHPP5fj3/m2UXe"
    ),
    "wav_ext.wav": (
        "eNrtyz1KA1EUBeA7jVUCUwmx0TLVkB8Qu8TCBw+CQmbQeiCkSyGEpHUfggtwkUmeWGUP3wcHzr1w1jmln1EVH8/vL9vd/mEc"
        "EafzTSzvSzlWMYg6bksW5aziTx1fEb/x9P25ym13Vz75Nb3lNnXD0lf9Yfs4b6bNdDKL2PT7fjn63wEAAAAAAAAAAAAAAAAA"
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAADXLum/E0c="
    ),
    "wav_f32.wav": (
        "eNrtzDsKwlAURdEr2opgaWNGIH7AUrQw8EAUTNA6KOnsgp3gUByUA/I5j7Was6tzTmX53URcd5d9++iKcUT0oxfbaY5XxCCK"
        "HG1z6wZ5P6OIQ6rqSe50LE+pKuth7kPzbNer2WK2mC8j7k3XvPMnAAAAAAAAAAAAAAAAAAAA/P0AtvQRag=="
    ),
    "stream.wav": (
        "eNrtzDEKwkAUBNCvvZDaRk8QjIKlaOHCQlAwQeuA2NkFa2+uq+d4b5phirnklD7F7XA9Pp7jsoqIScl+EfHeRUyjijZ3/bzs"
        "+ZTOuUv9rPR2eD22m7qpm9U64j6Mw+8lAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAD4+wLzHRVs"
    ),
    "rf64.wav": (
        "eNrtzcGqQWEUBeDNXBlLMTY4XZzOUAycOqWr0L0j6pTMjMjYo3kUb8KP8hTftwZrtydrVRb5I/mf/c33pyLvRsRgF2+37afv"
        "WXwdjud+O3UjZdqLuE4imtGORbXedNK/+i2X1brctNK9qC+HYpwNs+HPKGJfn+vXUgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
        "8PYEmFIZVw=="
    ),
    "aiff.aiff": (
        "eNrtxrENgzAABMCnT4GYJ4URyFIKBwlvwCaskRkyJCgrpL2rrm57S85jftW6bO1+pgxJ+WQsj++an97f985nAAAAAAAAAAAA"
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAD+cAGhhAiI"
    ),
    "flac.flac": (
        "eNrtyr0vQ1EYx/Hn1qWlL6h6i0i0FkPTqIoJkVhvsJqam74MhgpDYyIWL5PBIlZdKjFYGhJJQxCbCJYmSBqmGjo0KUv5PZt/"
        "QfL75pw8n5PnpC17VkRCppgYbhyjJlWRpBSH46G3aZl7DZr9a1fzEezDHvyx7Gx6IhaJRqKjYwbeAdxUJrGcTK1O/d1typAw"
        "xhhjjDHGGGOMMcYYY4wxxhhj7P/385VzySVQyiqNW7DgUzruQceWsukOzDSU5gtY2Vc2l8DtirLlEYwllM4nMD6gdH2D5xfK"
        "1gb4fK1sq4O2pXRXQe+40vMB7iwqvWXwPaj0VcCFvLL9E5x8UHacgoNlZWcBXDlU+ovgjV/ZdQbml5SBEzDsVHYfgzMbyp4j"
        "sFZX9ubAgz1l3y64PvILsvWDVg=="
    ),
    "stream.flac": (
        "eNrt2r9LAnEYx/HnrlOvPG2xKYd0DvFHuDW13uDqFIfpqCDiGjmou/+Cg/4DgtASiLQ1VIvQIjrd0hB0LXd9ns2hfyD4vODh"
        "+354/oVvy/VuRCRviSXKPjO+5FP+gPulg9f1+q1qpVAqlIplA3sG02w3OnfN7vXh7UEuhIiIiIiIiIiIiIiIiIiIiP6/KJja"
        "8oTY9DWNNXKR1jRfkOZQ8+gZ2Q41rQ+kP9GMbZAjXzP+iqw0NBNvyNtzTfsHuXzUPA6R7yvNk2+k52om9RtD6krT2SPHdc3U"
        "FrnLaaZ9ZG0eBT371LwfYJllfwFxL1Xk"
    ),
    "mp3_cbr.mp3": (
        "eNrzdDFmYQABpZDgYFcgzcfAwOyTWJZmZqxnqGdoYMSAAP8fWxyAczzz0vKBFD8QqzIwcDswSEoqKCioqanp6BgbG1taWjo4"
        "uLm5+fj4BAcHR0YmJCSkpaXl5BQXF1dWVjY0tLW19fT0TJ48eebMBQsWLFu2bM2azZs379y588CBY8eOnTlz5vLlyzdvPnjw"
        "4NmzZ2/efP78+efPn///g+wFui0Z7DYkhzGoMD2AMLgdPucyTmMgDfx/LHEESDF7gM139HU10TNU0EjMKchIVDDQDMUOsKgD"
        "mWMNMyeUSIDDnDIqmbORSuYcGTVn1JxRc0bNGTVn1JxRc0bNoZY5WMBwNQcA0oN+WA=="
    ),
    "mp3_cbr_noxing.mp3": (
        "eNrzdDFmYQABpZDgYFcgzcfAwOyTWJZmZqxnqGdoYMSAAP8fSxwBUsweII6Po6+riZ6hgkZiTkFGooKBZih2gEUdyBxrmDmh"
        "RAIc5pRRyZyNVDLnyKg5o+aMmjNqzqg5o+aMmjNqDrXMwQKGqzkAtmg9ZA=="
    ),
    "mp3_vbr.mp3": (
        "eNqllw9QFFUcx9/u3XHK8S8SSXPqwMMAJzokATH1IP8PtKeyjZq6XAz+wZJThzIrOcoUyUxpMERK0Cy9ZgQZbcim3AMkdXIk"
        "/w0yo3PgiA6Tziqa0Dheu7dv7/a3t5hOO8Mcj89+f+937/3e+32ZNTVFi4QnNnfevGn8ZxhCmmzbe0tTU5KSk5LN45D/8fTZ"
        "Wd9g/opVy/iPcP6nBqHIKPRCTGzcmISxSeZx41MnTJw0JWva9Fmzc6i5uW8uWLh4iS1/6YrCd1etXlv8/vqPN5R+8tnm8q3b"
        "dlRUfr1r97d1e/d/f/DHQ/WNR3/6+divx5tPtJ06febsn+cvXe68crXrWs+N3lu37/Tdf/BImJfPLd+bmywxZNKmi79ERvUv"
        "PmeWIz7r7a1I5wi6astEREXEN733bF03uqrW9XEWtKx/3Qee/iGppXkxBcg+BLmt5tCE/BUJa+hcTXCKbfOcjVWWhow1Lc9O"
        "rpnwXfXJIIeJPL6x1oDe4haTZcFlr9wZFls2Y2/9hdChWYyrLn7myKHm5e0ovKbspj0aVZxvPIfMHBMSdov/oMiuODpbGJOl"
        "UZXZmTnTaN9fhQE/cjPkp8eEgdOJjO0Ueecv70DQ6IkopzSg9La4QnFg5BgtsfKKGM3IUeiw+ag0YFBp/AkptKfP0tod6eis"
        "H1FtRW5Kn38YEyv/XlCvLzThbj/mm5RwnDztJ922Yilrhig1JIrEwlG6rsiLIrFwnr6I1j7Nzck3iN8RwehkrwmEIw5k3HYQ"
        "50wUsm8plJO/ifbUXp7EpbGWLBDtH4lMZOdPxWtghSTNlZcjLiImA0RThkBMvCbXiVfUKhI2o9tBVpi4tGZULSe+aNzEZnMc"
        "JnmQ8JrhkPRP5qNVmbiJbFUUjOZO7XYQl+K4IhKNgxqJlBhKF8LcGoSs/zBxRRpUIO2PSA5k3HUQ2SauRNNCy4kQrcebW5GG"
        "lHY7D5ISwyYnzKADkyXGxEqoOZnBk3YTtyEmXqE5KeTGE5nGCkmJJkuRWzuOVqT5VJFbByYlwRuVuUkag15tHn51SkhjlJL0"
        "iOtGWlbL5xF2W9RMYct0KqTNxKU0G9PlGfjJlOYIA9wFmaYJ1luDSKa4lk8DNTpA1AoV32ZKYa2LaHldC3sqatiZksbi0/Ri"
        "zfRKqKmVNMOMxTg3i0iqxHn44+iyw2gCQW8YGV2d5qJ0ggGhCNfIROmgQw0RoMEZqGgwYYjazN7AaF4Nm5OI19oMiJvRj07F"
        "xAJWlKM04aehRiK8Zrd02YH9obQx6ZX+m893H3g1MaHqhNJnvobJNlA70ewRY6M8A18luimyZUC+Or5KZMg6XaUqoUjXeBoS"
        "XPF+DS3N48ZngQrVN8I1aMJ1zYRsngQ10mlUavxnW02D5wkPL1AnTFhYMSTtgRojJEyQfjjcH3y/UdoWp1NqYFLteO83Rhs0"
        "loYafJNT2rbZTvh9hHuU3BnnbbBwT1lRw6/Bl2/DSsRE6MFOSA6kdrnJipeEhlwISZNS48sA9wW+Dq5dVqyBSNoZ0nUF7jYm"
        "QhOn4ckSeiNvv4ReXwnXABNKm7z2N7hukobv9YpTgongFgrgyarFhCFDO5UnWJxH7gIAAZYAr6jQSy7EBWj42hGJYBYUfcFL"
        "+A5Ioeb9sNdjEuAcBlScgxUSmQsY3DkoCO82oHPwa1zrchU3Oa4D/zy00lPwzuEg7HMy5/CcGC1PmVsVdk+00lOksY4QZa/H"
        "zoHMo1W6mdA1g3Xl0FPU+p3DQqVD8TmH0+rkiTSBzuEozK1B2J9sr3MoV/cUMs3gzkHpAgLcRsdjND1KTR6MxruNcvhNZW5j"
        "uIo/4EkKu30UJE24ByudA44G3YY1wG18DusN97kUl32Rwt3irvlY56B0Gz7nMNPSq6qhUN4XicqbAndNXV00jCY5B91TOIfB"
        "3cbgzsHnNgKcAyZy56AglP71u/D7SB6JIbd2qnsKXjOg6ikY7TPG6//pHJRuY2jWSJiBVDu8q7mu0rd5T8GQ+6oV96jfORQ+"
        "RGkeDtWHAvKL/WFLXUqW59BUNn0qOAvnw2Y4qz5MX7kju2D1MXCyNriDXmZHcXf6h5SNrgOe4tGL5Yg16Lc79IiFDh8F9Y2p"
        "p384fuGjkbFOcOqP7LlXuPXUweNs7KaOGEAeMIZNw+I37vlqX830nSCDkrPPR289Mzk3MXdOdiYgwrJ4q/fVpGQjcA7xtnfs"
        "y21GcwL/Ag0ILX/AzadC8E0eQHyeQkXDDqIZPBr+r23u02WA+4KCGFs9Ienr9y5YGEHQT/Z4+syt98PNnedH7NqC6P/7CLnd"
        "RUgzk2ARjPYvEqbpeQ=="
    ),
    "mp3_44k.mp3": (
        "eNrt2G9k1HEAx/Fv3Uql2oxEpFsmXXF23YxEVjpZNtHtRCSnnKWsEiMpUxKRiIxEUkoiEkmRk5uIlPSHRBKRiMTEpes2cWuu"
        "J8ud0ev75Oee3O/3uvt9nry7NiQbwuhZ2ptOp8rX+SFEurMDuY5kPBFPtK0KlVMqdubDxNPVn9tXvjSGMLslRO4NhekzZs2Z"
        "19i8YOGixUtaWpfFVsYTyY7Va9Z2rk9t3NSzeUtm67btO7K7crv39B84OHDo8NHBYydOnjp95uy5ofMXLl66fPX6jZu3bt+5"
        "e/9B/uHwo8dPnj5/8frN23fvP3z89PnL128j34s/R+9bfsadY884/mFaZ84du5afo7Ri5Mfvp24qhEg+TLtS/hANoX0whIbu"
        "dT2p9ngiujy7d39fNtoWy0zyVL6oVGwuxI5PuM8/fvtfbtRUSNfsRn+CjkTqBLoWqQ/oWb3+oVd1Ar0EAgICAgICAgICAgIC"
        "AvrPQOOqTlVQTX44oKkOslUgICAgICAgICAgICAgICAg/Q9I/7NVICAgICAgICAgICAgICAgIHUJSP+zVSAgICAgICAgICAg"
        "ICAgICC5DEj/s1UgICAgICAgICAgICAgICAguQxI/wMCAgICAgICAgICAgICAgICksuAbBUICAgICAgICAgICAgICAhI/5PL"
        "gGwVCAgICAgICAgICAgICAgISP8D0v9sFQgICAgICAgICAgICAgICEj/A9L/bBUICAgICAgICAgICAgICAhILgPS/2wVCAgI"
        "CAgICAgICAgICAgISC4D0v+AgICAgICAgICAgICAgICAgOQyIK82EBAQEBAQEBAQEBAQEBAQEJBcBmSrQEBAQEBAQEBAQEBA"
        "QEBAQPqfXKb/2SoQEBAQEBAQEBAQEBAQEBCQ/gek/9kqEBAQEBAQEBAQEBAQEBAQkLoEpP/ZKhAQEBAQEBAQEBAQEBAQEJBc"
        "BqT/AQEBAQEBAQEBAQEBAQEBAQHJZUD6HxAQEBAQEBAQEBAQEBAQEBCQXAZkq0BAQEBAQEBAQEBAQEBAQED6n1wGZKtAQEBA"
        "QEBAQEBAQEBAQEBA+h+Q/merQEBAQEBAQEBAQEBAQEBAQPofkP5nq0BAQEBAQEBAQEBAQEBAQEByGZD+Z6tAQEBAQEBAQEBA"
        "QEBAQEBAchmQ/gcEBAQEBAQEBAQEBAQEBAQEJJcBebWBgICAgICAgICAgICAgICAgOQyIFsFAgICAgICAgICAgICAgIC0v/k"
        "Mv3PVoGAgICAgICAgICAgICAgID0PyD9z1aBgICAgICAgICAgICAgICA1CUg/c9WgYCAgICAgICAgICAgICAgOQyIP0PCAgI"
        "CAgICAgICAgICAgICEguA9L/gICAgICAgICAgICAgICAgIDkMiBbBQICAgICAgICAgICAgICAtL/5DIgWwUCAgICAgICAgIC"
        "AgICAgLS/4D0P1sFAgICAgICAgICAgICAgICUpeA9D9bBQICAgICAgICAgICAgICApLLgPQ/WwUCAgICAgICAgICAgICAgKS"
        "y4D0PyAgICAgICAgICAgICAgICAguQzIqw0EBAQEBAQEBAQEBAQEBAQEJJcB2SoQEBAQEBAQEBAQEBAQEBCQ/ieX6X+2CgQE"
        "BAQEBAQEBAQEBAQEBKT/Ael/tgoEBAQEBAQEBAQEBAQEBASkLgHpf7YKBAQEBAQEBAQEBAQEBAQEJJcB6X9AQEBAQEBAQEBA"
        "QEBAQEBAQHIZkP4HBAQEBAQEBAQEBAQEBAQEBCSXAdkqEBAQEBAQEBAQEBAQEBAQkP4nlwHZKhAQEBAQEBAQEBAQEBAQEJD+"
        "B6T/2SoQEBAQEBAQEBDQ1ANVTlVQpganKqgm9wGa3PkFv8K+CQ=="
    ),
    "mp3_id3.mp3": (
        "eNrzdDFmZgAB4xDPECMgzQ7EGak5OfkMIcHBrkAOHxD7JJalmRnrGeoZGhgxIMD/zxEH4BzPvLR8IMUPxHIMDCxvGLS1tY2N"
        "ja2srByBwNPTMyAgIBwI4uPj09LScoGgtLS0pqamGQi6uromTZo0EwgWLFiwYsWK9UCwbdu2ffv2HQWCM2fOXLly5TYQPHr0"
        "6NWrVx+B4MePH////2eAuC0Z7DYkhzGoMEEdxvLmkcmRSShuljgCpJg9wHodfV1N9AwVNBJzCjISFQw0Q4HAxxGkRhymBosK"
        "mBo9ItS4EqEmhgg1xUSo6SJCzUIi1OwgQs15ItQ8I0LNi1E1FKgJDUVRE4odjKqhXE2IozukWBwY8B8ABsSTrg=="
    ),
    "mp2.mp2": (
        "eNr7/1fiSHDGJk61VavW7/v9HoR+vq+6sc0u68a1rWur723T7Z+1zXRtdtz3td3Jz9b2Zkdd3/s66cbP1clR17ZSXeEWhv+j"
        "7hl1z6h7Rt0z6p5R94y6Z9Q9o+4Zdc+oe0bdM+qeUfeMugfDPQCI893I"
    ),
    "adts.aac": (
        "eNr7/zHHgTn+zx0Gn8SyZDNjPUM9QwMjBiYDB77/QBnG+j+MEgrsQ4IJAO0KTeY="
    ),
    "adts_30s.aac": (
        "eNrt1rENQFAARVGfQqdWmkB8ErUBFDYQsYPWopbQS7CFRE53kte88t7nNGTzdSTjsq19V8c6Nm2SNkNxv0vYr1BWOSIiIiLi"
        "fymHEREREVEOy2FERERElMNyGBERERHlsBxGRERERDn87bsHt0d8lg=="
    ),
    "vorbis.ogg": (
        "eNq1Vn1QU1cWvwGEAJGJNLIR0SZqah4Y6rPSGmbchSiWvKDiiwi8jLNrQqqQgB8RZ7TLDisBLaZuii8pdtHhIy9jAi+V1KRr"
        "3KVWTcTIZDCS4IpW7ayABLud2em4M+5M976g1Z3Zmf6ze2feveec3z3nnnvuuefdrbt3K0ECeNF2xoZnmfFPkVsVrKWsQ3sP"
        "qGsNjIBV9ObcjObKufE0ayujCV7XZMExMfi7b9N/+ePL5kmcs8GBUNmuQx+8+04+mo+uXsNMXQo/bYNmb432wHqIaV5iAn2t"
        "ek6LNW9uzJRt2AE1WICD84SiRUpMw7bgODJviaZc9f4SzZh0k7CGqzwuX0R9uDXXUoUNL8CrkJIlyjKl3IJbIaXhKUuFyiiq"
        "7THwFG3yVJF+s+tglmL6tMaKblqiCRHYGU0UhfNwXN5j4Bd+IKrhFW7yT6t/u7rQ0isTD13/Bn8iaW1Xtf9lPFsZkxj5itqv"
        "2bsMTz2Re1idn68xoQH/t0rx0VFzBeMnKEpixX1OA+BKOadkWzMDFCWDZsAr2c+7vj/n/Y4VNxPiU4oAE3/xyUfijuXyjppq"
        "q7baaj9sPXfR+fZzV37M9XTGl2FsG0gCwwDw24THvpGPmJVm+VtIxYiU3fNDhvQxryaMBzrVpm0hs5KDzkPbRpFW7tgWKcVZ"
        "xt5QeqYmJFCsn36onlrHzXYvA8fhaqZikzBgNnCwZOGBk/JhwcaQFDlDlmFi+oJVniqxRJdNdZFbsLeoC1n4TRsZleXNAyBp"
        "Hfyq2K1tA2zQCwC3xYyXItdI9Rb0GImfRK6b8RGpv/OACZ0WbB9Bh3OMpYifb9ginRTUcHInc4wc5tRZGfDLkvUI8xKa17FA"
        "y4raz6ja3j21n4mP2M85e8VO5+PD9ien7c4jvQ6n3elzOZwu/eGztQx6FnE6IatzOmPtzrqb9v673idO72zQ3XDJPTBx1hn0"
        "OnzuBqer/pJbH3OtmvD97bBz5rQ9dsT+xOeM3XXP+NxPIdvuzJuwx4LuWNBLB90uHUR7+++6oO7TIKM78Nwem/HOBH2uoPu7"
        "Ca/ruZtOvzTt87qCLle/eyDmlsS8+gnZjX9sj7yzefyHstuNFeOe+khjvQqyBTsrrSWRRm3E0rizUat6BtHNlRbt7QpttUV7"
        "/5C28tMSOLnC2gTRX39af/+Ztnq86XZjo8qinajUVj/T7nzWWv1l031lheq9nZXjm8cjTarxpl3e+ge/gGzFX6OtFdbGB9Em"
        "bWfjmdU+6JB3NuZcFRtyxQKrY77VA776f7no9Kv9scAgFN4b+kPdxND3M170z76GnEvnF3/19Hlg0OGs/6OrP2bPi/n0saG9"
        "Md9+E2Sdq577ZoIM+31s6G1OX2zGl3vTd/6u+/ObvnzOJdfiq3UTV76769s34s7nfPn3vOufp2+IeFsfRRr7+icCe9Ovht87"
        "NAQLBCsFZvkbwaKXR5wsZC/UcHMDAiMXTxPatqPJQk0GFsghuZhcSIYhUANTMOcUF9vjIEcxMUWVY4oeMorXSexjBKfnAg+r"
        "pckwUYd4x3A9NLVmygY1xNSFHVgtYijDAt22DFkuZQtjclobkt/o7gtLSx22MC53eMoxHTSFYYNUGKun/dlYrcQWJiAwhtfT"
        "HmI5XNxUfKPrFI7JHXCNyS4yozD3dEsHhjgsHfhA56lwsVjUYsLklKcDy5sz1YoTOjrSiSsKyA5oyg/XoD3ZyryC1nI8Hd4Y"
        "6K5nh65O4i2X6XpsWYpc1JOlgYvzIWDLVCEOf5bqY9pTpVQUWDvUejpyB5NIo4QOk0TDuIn2dKrKLvqrdPNFcVPQK4z2Rwma"
        "WTx30NJBMBqEqYAMqxHEY8b00JRKX2C3qvWDkSr8BBqoMig8EZI4AQFFXkGAr2soeIwDcLk5ERQ1p2q7R80WUMQD4Dccjal4"
        "D+/AiBT5GA9JV4oMGTI2og0Vs4VUSMqmLoxJU3pIUoYgFE8lFlFRYhUA3ZdZQHA5efNHflba/OpUsBGyAbGfbwwIKH7LKL+P"
        "Bw+b4kNTFE8TKh7mG0LFyCJIrRQZuTKEgp2YImENSsuBhU8/SlblQIcWsuYcUnPQNsFBvBBZYCzDVlKfZBLpiNaKtYsCI8RH"
        "9LU7pal0a3SNThQIqzfR16rUuQDMQodmL8vEa2tEwJwCihgPQtLdXDUsj8K1bBRWHph9XczeFkIgRWgMSadgMsqmugxcGbun"
        "BXYUGYabNuLYE0HcyYMMQOKweufuA4B9fluN4egn3bBcJ4DDMMVRDAaL2oQEBDaeitkwXkerOTJ4TlUwu6moelZgGyNMnkMQ"
        "kASIDQygCzHAQME4A0ze+5ABDKGLANyblwLOJy4ueXclPzX35SagYY1JeoxUm9Cprg0YGug0hJAAjKV0igGg6wwAWQaQxqmp"
        "7hYzQ40WTzMsW3gQyuDe/9smHjGbIHEMoWB3ru8FlSCkXsr+353lP0VA8CAtBfyYsnh3lbwwL2d+PhMHLvxV8K/yjSYm2G0o"
        "mzq4BZOLCkzFYsqQCbVaRok6eOtxbJGRVKcLLSSRBmuCDnF4SFyM+LMVmIOKrplaYesgFLS3U5pC2aJEHe3nyrBBTxTXDTbC"
        "vz3tiRL1EhtJ6CSBqFovoqyEzgGvW5nDk6VSMDIF7b+jhrcqOx08bNgHmkvP72+z2L64cuthPJRCFkhag8HAM3kkxNtReA4M"
        "tRFDJ+dkRnhUTFrBjDLHs5GR4YVQVo6lMvufissYKlU4dz3g7iD1Ijqin2TUK4p8RWXGczU+ec5KXE3MpHOcShX9FGjhayEH"
        "zYlMpV4+vaIvuEy/9tGVRC5gniIJZeD3rKNHt7ETjAvY8bcdG/wTgNK05uPH90xyMriZvCx+ds5SwbIV4LWW9OI9+Oar9yDz"
        "rCyp/GqVgPUzDfxMe2H6V69MJ8JRnXri6/+N6aTLG1+ZToJj961r65NfN/BvBIhS7Q=="
    ),
    "opus.opus": (
        "eNrzT08PZmBigALmQLPTIPpU1vE9jML+BaXFHqmJKYyMFowNdmAF/iDlDMjKGYH07+dr+RhtQMpDEtOLeYAiPollaWbGeoZ6"
        "hgZGIBUyQJyal5yfklpkC5RLhskp5GQm5QP1Qcxt2I0wF+SmEzcX+Rqxs5EKOLifWSuvTuDgWLOZ79goiZ8EhzzLD3tGeMgz"
        "A+k5d0W2qhAV1sM0WABEjvDU"
    ),
    "long_opus.ogg": (
        "eNrzT08PZmBigII0vsTrIPpQv9U9RmH/gtJij9TEFEZGC8YGO7ACf5ByBmTljEBa6uPV5Yw2IOUhienFPEARn8SyNDNjPUM9"
        "QwMjkAoZIE7NS85PSS2yBcolw+QUcjKT8oH6IOY27EaYC3JTuEWkjRE7G6mAg/uZtfLqBA6ONZv5jo2S+ElojJYzwkOeGUj3"
        "3fGvNWIjPeRHA5XEgG8wYoIHPAuQXiYTc2I04OmR4t8hAp4VSP9kusc+GvD0SPErmeEBzwakD6gJXB0NeHqk+FQWeMCzA+mT"
        "+l25owFPjxSvwAoPeA4grXgxM2Y04OmR4u8gAp4TSNvPiJUdDXh6pPjpbPCA5wI1/9v+eI4GPD1SfDA7POC5gfSi7nVaowFP"
        "jxTPxwEPeFAH2JRZ8MxowNMjxZ9CBDwvqCP7JFRtNOBpH/AsFcyc8IDnA9ILN33zEKB3sAIAmtLrvA=="
    ),
    "flac.oga": (
        "eNrzT08PZmBigILHW/dngeh/9yuFGY3r3XwcnRkZGBjTfBKdgaJKLAwsYGUcooxfGD4wYAH+IOMYkI0D6meYxyD5ntG0hYHB"
        "kAfI80ksSzMz1jPUMzQwAslKAnFqXnJ+SmqRLVAuGSankJaTmAw1UAFhIMixvbdXvuLghoL/P5ZwMBwEit4qAzEZjwGZ2/hA"
        "TKbzQCZTG4jJfALIzPsHYrLcBTJfTwYxWW8Bme2vQUy2y0CmcTKIyX4FyIyXBlvNskADYTUzkA64uiWImZubB6SQ4ydQYOce"
        "EJPzH5B59cj/HykcXPO3AtmR0gCje18O"
    ),
    "aac.m4a": (
        "eNqlE01LAkH0zarVIcIoKWIhA7uZaIl0EuvUoSCIoq/L6Ozq5oy77IxCnfbYoT/S/+hndOnQ77A365pjRhA+5vE+533OAIDt"
        "qsfgrHqUB7BAU0/6AnEfAJbc0HGQ3glG1Tuc0kGrdlCqlCrlfbDKjRWymV+cBwFSdeH7A0zBxaDDYAq2GwD1CAjoMwEy7fVT"
        "bsCfYOHxVEi7yN+rbpwzNRsN8xo68v+8BYcpidR2uFSTGzpuOrlLPgTzKDJ5wX7r/Ti6fIuFvQ7j4dgi/X7P9LxAmZ3QHuOO"
        "9iEvwuu5yGSlmApaYCO9zULHNVpY7oc8P+LJuVRNjvyDVJIZPrciqNKZtglkx6Ui1BzJdMOQiqJoF41ppBuN3Hc75DCDmkzu"
        "+eoTFpAjlm5dqnhMyWp0xHSSxdIrsLGSlpFZ42pCr9H2ZHSo9WswCjAPrkvV8o2cRcQt2Q6YFkKf86RWMhzGFTbbAUwsZoW0"
        "z5Se241w1Hh+O+Yy8QGENAi4udCiN3oxhVfl+/HCaHw5Hjx+QXf8Bb8AxsVvWQ=="
    ),
    "aac_faststart.m4a": (
        "eNqlU81Kw0AQnk1a9SBS0aJIwQj1pqXVUjyV6smDgiCKf5e0m7Spu03Ibgt6ytGDL+J7+BhePPgcdTZNm60VQTpkmNmZ2Zn5"
        "ZjYAUHDlU3BePbYADFDSEz5HPgAw69z3BwDA+KBDYYq2GwD1CAioLyUyHfXz3IA/ycDPk6H9iPqDfIxrmrPZsK5mI/+vW3So"
        "FCgLDhMyvaHyZpK75JNTz0bF4vQ37CfR1Xt82O9QFo49wu/39MhLPNNTu0eZo2LIK/d6Lio5waeSFunIXqCh42oQlvshs0Y6"
        "uRCyyVDvCimoFnPHg6o9A5tAbtwqUs0RVAEGM4qiXXRmUG408hM45CiLlmz+5foLFlAjhoIuZDymZDUqYyapYqgVFLCTllZZ"
        "8Woib9D3rCFU9jUYJZiH14Vs+WlNs4tyS7QDqoqGPmNJr2Q4jDtstgNIPXqHdp9KNbdb7sjx/Hb0ZeIDCO0gYPpC97zRiym+"
        "Sd+PF2bHl+PBn9kDt3ZYqpQqZfx7YMkNHQflPcegD+VtTbxGubFCNq3Fefgbkzpvmg=="
    ),
    "frag.m4a": (
        "eNqtVEFPE0EUntlu6YWYJkrkQMKaQPCgpCg0HNeTHiCSGCUaElk7u2llp9vMvDZAPPTon/AO4YxnD9w8csSrf4Bf4HvTzjpd"
        "SxObTrp5733zZr7vvZkOY2wpgZPO7uaLgDGPkW3prI7fFsZnMst6jLFU9pqCjYzl0Bhufn8HH80qxiGbODxccAEqOkL/AI4M"
        "Z2nC7gbj/83LX0rRitAJpBhf19srEzxtilTZGZ11227mG4zFq6gt0tjk3MpWO0Fb1XJk0xUxwJeEihNH3nxXpcHQ/67hU4r2"
        "swYtnJwPsrMZ/VMSZ1XnCOqxFpqcUr/fX8VJH+3DcCEvZzksI1Je+PruN5tDj3tGJYB2VGKsG078AOPTQlMxp5E58WPZi4+p"
        "jaCMtSqLhxF1BVAV72UMtppHbmvxOFTU6aTuoietVAO17xyyzLQvMovN5jtRL6k/X99Y36g9wxDwnprWy6Tptu8A75JpPRDu"
        "se0B7tP8fW9YKCQCCopXQNFZewRT8hfKH/r2W5Mo6BcpaeRKvFp4jy8GFfthmhgjjZh3Jkjzx0urDjAjjVlp1LNFkuLyTuAu"
        "TccdzILbn467Ngvu8nTc4Sy456bj3psFd+Vubv7jbu7DIjcfcs9bbvQvZaLoL/kN0PLRV6pSeNmvOOfONaab+DGHAgvd5FDN"
        "3pn9HLKPuH+dQ3v2dF/n0KGFfg4gbIayj9blH6Rkz4Y="
    ),
    "frag_av.mp4": (
        "eNrtV81rJEUUr55MZj/8GjGre/BQapQFk0n3JBl2Ay2JITgHBUGMiMJY012dbqerq1NVM8msIAE95CyLh+SyCB78CzyIuKCH"
        "xYN48ODqHtaDBi8rgkchvurpIp1xNhhQ8DA9qfr9XtV7r16/VzOpQghNB6qfRpIzhEpII7QGtDrpeQ5LFxyEyl8yznsIoZj1"
        "Qh8dez7bycDK/o4e67jWsLyMTnxKYHCgBOkAf1N1sjUnTvB+unWreUPWe8yPCBDM/OH3upT1r36VwWzox8LM9CKfFjXXQeZN"
        "kvgx1TpWjUVJAGSqxzKnxRCm/cHc476gQSHE+7sixjm/K1U7BvxIKukXdD7QBblnAqrwaQI2jcbUi6DfmK85Nceu4zhqb9cb"
        "C0WLi4eH0M+A1qr1/I3zhz+hCxuAP7xjVXW2s+7670++baFy+M1DN/UaKZFpvrpuVamULMYAEXsFeQrkq8NxSuXxQn2+OKHM"
        "pVEFtk69vaw37l3mwfYdVWbJu0lR8xWQ/UKZK3mZq5Idc/pPSvx1XuJ3h0qcwPeN/O2VrMFuzb9pDSr9LOkTOzs7T0OOyoCP"
        "LV/INB/Y1W0SRiYf3l3/GVWAWTqNU20lFCro/DvlQ03Wo9s6tUpkiArbo/gU50sj5knXV/rNX2dUmQw8USwHlFCQNI2LRjNR"
        "LPVLTX+iOM9STjLjzDls/8Bsf4TO/AE/YVm5WBAWUm6dhf2nx6fVYPzKUXDlA4TO/gjxvjbYdGhKBb4aivymEnqfTEwCfxTW"
        "+XOwaQd2gFo49//Hyncj8lA6ykNZk0fygRF5qFzL86CHv0XovqqxybE8xjGOcYxjHON/i1aOlQ6DAwH8G1urTB4ertxe+/Xz"
        "X241P/1w5nt866m7v+nzMJ7FHhcUO41FoM0aDM299PLaC7MLeGV9FeZ86sHEKk/7MQ0Urtv2/GzdrmvtUKl0aW5ua2urpq8E"
        "PCZJjYuNOe23FioWgw5PVcQTuYQ90iaea2M4E7oO9mk75l7HtZfgg0lC4r6kWsKMunBWxbLbBmbjVPZBHfqW8F2nZoMKdJhF"
        "29RvaV/aoiVIskFdp4G9UHBGWmDq6ANXHEcSNC5vX/Y9BcTbZND7lPhXeULdujPjODggUrVS2YlSMModbKYtHgSSaiMVCjCQ"
        "MBlz3iEhCK2jMRlHHj0asHEisiW8iBGlw4gSRUVMQAnG23FXkH7L4ywlWUCQGzh3RAm4AEVBtE4gCKPa1RaNNkKVAuvQPky7"
        "9UVDW3D4dhex9GhCva52lZnrlAgqQ51oz/VEgBmce6nOJAhufb5m4029umvXGkBT7SZDsu02rgCRiqbuAo5SSCqUDnK+AAXa"
        "dG2kT9/n6e77S89cQudKd0CaXNnDz10bkGVD3qp+PCA7hlw35IYhd3KyjwzBhiwbYvzsGz/7xs++8bNv/OwZP3vGz57xMzqe"
        "26h4OUQle/lB6yI+M27jNm6nb9nNHX62AJ9VgNbxG/zQjbF8YGX3yaJq6WRVuLQKc+tO/gJKGfw1"
    ),
    "h264.mp4": (
        "eNp9VM1vFDcU9yakfKhVoxIkDjkYiKoeksnMZFlBxEgJUcSqaqVeAFWqNPXanp1h7bFjezdZuHDggLjDgVMvRULiDKdKHHro"
        "qaceSoVUeqnopVX/gu3zZEcZUmB27ffz+7R/zzMIIZy5sS6skgjNIC9hxGREI6nbEULoWGY4B9t9yYgDuf3B3GSy+XL7rx/+"
        "fNF99mD5V/zi3N//7MWdNl7BVBmOo855gN0AVKtffrV9ZaWNN69tgY1xCoYtpceCZw7HYbi2Eoex986d0+urq7u7u8GoYFwJ"
        "UgbK9Fd93iB3UoCP0q5QpV3HlPQITUJseJZEmPGeUHSQhOvww6QkYmy5X2HJE1YQbIc9QCHWdgzuMKeGJVEQggtMWBZ7nKU+"
        "l49IDSn7PIk6mOZGSZJCaISd4UIUFjwu7F1g1AGgOxJmxgm7qUqexNFyFOGMWJdqOyg0BE0T7OhUZZnlPsjlBgIsGIVSA5LD"
        "Ij3QWVFQfqAIcWmqErSQxPltFKXjRhBwAn1PDA0Zp1RJTaoNATfOkKKEFOBoiPfJDJHcp9rlRT93GtCAj8GcxOdrmMqiTGJs"
        "KS85HfpUVbinxHCbe6JpQk2GZQ948EzCIonXghDv+OpJGHQAap+mkmQv6VwEYB3XSRsXGkiF1gHnbWjQThKi23CxTvC7d9Y/"
        "/Qwdn3kFq7nNh/iT7/fBxskp+LYGt2vwXQ2eezB7SSo1AoWQo5yhN57Z1wh99AS1kP8fPK03vQ6vN9B7nxn494GbAeBv3KCq"
        "Ofv/bFAXvb/OW+vOTwdCS5w5C3KRC+sOIqZ5q9jW7xIuNwAs2eGz+2yv0NUfq8VKzoSpLf7lanpe8y9bl5RMcO/TugdNzAAs"
        "jGSVtLnNJbZvW2RwMxrH+HBoBN7Hrc+t6wnAT62zrOHzyH9R3kGFP/Q86oLs1h4LX4B/Zy2IgiiMsSh6/jvQjDg9mcC8DF5b"
        "rcvPT0z+QKf6IH+71Zr3HammjX/P3mihI/nPH//ka2hi9bS6HwtwmafUzv1SZ7Wuor3e5VFg1+MFOE1T78ci6Ogh3dGpDMF2"
        "s7Fb0M9cB3n8HQPyU9XIFcIgQ+Z8e7+WvJL+OdNsJbTfEK1Fk5blYv++LD12SlWtIlVwRTlwmtWc/gcCV0SG"
    ),
    "h264.mov": (
        "eNp9VL9v1DAU9rXlR6ESFRSpQwcLKoRQmyZpOUGlSC2lcANILMCCFHy204Szk5ztu+uVgQ4MzAwMjEgM/AVMSAwMTIgREAMs"
        "CIQE4i84ntM7Li0I5+z3vef3vme/lxxCaCoy3bxpMEZoBO1IdLCTMA76lmTEgFzfv6/XW/24/u3Fl/e154/m3uH3J3/83PSr"
        "S3ge00xx7FXPAqw5YFq4em398vwSXr2xBnuMU9hYy/Ku4JHBvusuzvuub71jY/LlhYVOp+O0IV8mSOpkamPB8jqxkQJ8stwk"
        "WaqXMSV1QgMXKx4FHma8LjLaCNxleDBJiehqbjUsecASgnWrDsjFue6CO6yhYoHnuOACC5bJJmeh5bIRoSLpBg+8KqaxyiQJ"
        "IdTDRnEhEg0e5zbPMWoA0KaElXHCtrKUB74353k4ItqEuW4kOQT1CZp5mEWR5jbIxAoCNGyKLGuQGJRwaNMioXxocHGqihQ0"
        "kcTYYySp4UoQcAJ7XbQU6YY0kzkpDgS1MYokKVCAoyLWJ1JEckvV4clGbHJADd6F7cA/O4ChTNLAx5rylNOWpSrCbUkU17Et"
        "NA2oirCsQx1sJUEJ/EXHxU2bPXCdKsDc0hSSbAbV8wC04XmwhJMcigqtg5ovQYOagYu24cU6xB/cXz51Go2PfAJt3+pjfPTp"
        "Dlg51ge3LRg9ILOsDQYh2zFDu8boV4QOvEUVZH/DUdnttVdfQf8dI/CzlWwAvmUaRc7Rv9kgL/p/nn/mnexPhGY5MxrkDBfa"
        "DCP6vEVs5buENxgAlmzv3S3bNrrXK5T5mAllgYyFahdf7HBM3LCfVI2kTHBwqjyCTkVgn2rLgrR8zLkBEQOilhK4THT4IjHk"
        "Dw+aZTs8MwxeldKVJ/pxti1ntKkLwE+00azk85C0qVcu06VLV68VtbdzEp4awNrAY+oK+FcXHc/xXB+LpG7/GMpHm+7ZQsyB"
        "11rlwstDvc/o+AbID3crk7Z7xbLy68SdChqL3xx5bZuQE533s9s5rU3RjsGJxqDqFk/Byct2O2fARvfYxvpyFva2SicD+8hN"
        "kOOlCZw0K8XP2ha3mLGtnn6mOwpNXH8FV44GV/4Nd8430A=="
    ),
    "vp8.webm": (
        "eNqTcr2/eL5TWyOj03cg/tTI4vS5kcOpqaU8NSnXqb2Ryam1kUkiuCGdkQEEmAIFfWeX7PLd3R28ukXUc2Va8JrGhRCeWMi6"
        "bCDvmu/uHiBPKORwevCaJkYjCFcmeDdQsonJ+g3EHIZIBloBkKs2aF3f2Mzv5ODb0OOTWJZmZqxnqGdoYBTuiMJ16exwWNwB"
        "1gRy/PV1ULf5XW9kLD7a0bn8V2PHX9ELcxoZlLbOaS7NS+loZGhrDYsPC7BobmRUftzcIns2leHBhA2NArsaBWY1MoVuaAnd"
        "2cgY+q6RAeZPJgYGUFD8Ki6en3ygIf3ETNfF7a5+zv4urkEu7SiuKS6+mnygOxlhb/qJBciKJwMVJ8MUK+RkJpUVVKSfWOi6"
        "uMMlNMgxxNPfD6jGwMAKhIz0TA2ggEHeeVupQ8vzRobFixsZGBoEmBjmMmoJMAgwMLhztLZ2tLZ0MDEx8PAmMPz7vzqgYfHU"
        "RsYvDBsZGRgFBBgkGCQi9L8wcDAwAIWZX2AVZr2DVZj9AqYwKBFM3N2/uZFhexcwsX1sYtz4oZEZAAQzv0Y="
    ),
    "opus.webm": (
        "eNq11e9LU1Ecx/Fz1XO2iH4YGBX9lh4UOLai0CLY5gYNnCvnDB9Euk2XlLVY68eDYGebbjqjhhWIis7RA3NKZivqUhllGCTU"
        "g5QeREiUBRVZREQU3bsl9+Mf0GGD15d77t1hvOGuMr9O9hibuWD8IX2/8jzjN642BsOn6pyNxog0NvGcFfaARyDyYqfzrZ0n"
        "7ljFmH0gXGDpr7eneCI7La8cOixNk1axTZqWVT702FNBoSw7rraL0sUgc37MPodUk/+15FNd2zI1HFpi1FsDbWW1J+t3bNPo"
        "NDrt1v2GeaOpJarvfpa5ST787NC/sx2a4oJvLHrd8v7eWu/9WBcnG9NdIf9Rd5ST5mbDQdteh73qasil6a0Sw3mPbpAQzyl8"
        "EwoLuiIyHe/hQjqqn/FmHuV086WOz5y4+tptXr9vT12tWxCKhYCYuSr/Sb98vh7XaMAz3mFORszlpTaTucIUmXdOn2/SNRpz"
        "KSfyjCdw80Vps2tu8/ojDc5j0k9l9kRNjgpDpcVWboq0a7U75Y9OU6It1mYWWVd602+6MMNJMsYJCagXvttVOFCTbOWkIKBW"
        "p0YWP5a9GbwbvA9cBz4DPgdOgNPgJ+BX4FnFAgWvBBeBDWAHuAF8FhwHXwHfBk+Ap8HfFecsAK8B68BmcDW4EczBl8D94Lvg"
        "5+C34J+KcxeBN4C3gy3gA+Dj4CZwB3gQ/AD8AvwB/FtxXj54E7gEbAXXgv3gFnA3eBg8Bn4J/qSYCmDon0L/FPqn0D+F/in0"
        "T6F/Cv1T6J9C/xT6p9A/g/4Z9M+gfwb9M+ifQf8M+mfQP4P+GfTPoH8G/TPoXwX9q6B/FfSvgv5Vc/33Xk5IUyPJTp1c5e8L"
        "k4k/NfK7Ii6eH+HkVqv0TpoNCk+/8Ny/gGmIXQ=="
    ),
    "live.webm": (
        "eNrt0mtIU2EYB/D3zIUrK8uyLIosv1SkuG4EJWzHDRRam21agZLuTKektljrAgXn3eaFNiHJIlHa5hIyl3RxUSxh0YVFCQXF"
        "vhglXfaloCvVl+psM/a37wuC88KB38N5OO/Def5L1S/8HradMuw34flEpexnKmPtzsP1xha2QyjbqCRPz5uZX8kzX9N3cFgT"
        "cumHnbnlQw36APUlq0WGkX1C9VATcgtVjuGOWR+wMyXvGJI4jeQfnfhUg2ujVxzZrELDu7fXHWrYvKFIXiQvXr9LOa2MT/x+"
        "ZGo+U5Qy1nudY5dzZrWdc7X2U7Iq2O+wtZo6KWlvV+7V6ir1VRcdXJG3KuSU3h0lDiopeOVwMvJCMtntoUywUxGzJD5lNNF5"
        "3MAprcVmLauvMzHMFoYPJd7E/0rUavVwYd4c6VX7O9Q7SrUq9U5Vx7TBrNarXNjFpaYxR3zY3CM0c3+a85ubjPuFq1aUXrex"
        "uhglfhclhJdlvd1aMFzrP0FJLi+TBa7NvR/3GnAJuAJcDz4K7gL7wEHwA/Bz8MeUmRngJeBCsBJcCW4CHwd3gwfBN8Hj4Enw"
        "15QlM8HLwXKwGrwH3AKm4NPgIfAY+An4DfhHyhlzwCvBm8Dl4BrwAXAbuBd8CXx7yolUVcfsGc/iWySw0YXg1eBtYB3YBD4C"
        "doO94FFwBDwB/gBblILzwOvACrAB3Ag+Bj4JPg++AX4Efgn+AluUgZeBi8Eq8G5wM5gH94AvgG+BH4Nfg7/DpmeD88EbwWXg"
        "arAF7ASfBQfAYfDTvxKWOSYmTExYOhOWNSgmTExYOhOW3SUmTExYOhO2wCYmTExYuhKmmIjZF9f87wnznvHFM0aSVR/NtA04"
        "yfjP2t8qqb3G"
    ),
    "av.mkv": (
        "eNq1l3tUlGUex2cAb1CJBWZS+a6XUlSYQSBFx7gISUlaCIpdxmHmnWFimBlnBgEr44URUBSh1NZLCKJWaoKZmboGO5MnK+ts"
        "lpqbbV4qLLPSWtfd8rC/7/s8nAfP2X8XjzjzeW+/7/P7fp/f6/DMr9va0msUbfq/6O9VJSz9V2VgelVdicnncXmLTem1hJYp"
        "IcNyK23aHvYzJGejb0+nv2ZA4v6cQ/W5O/3R2a9bc3cprezb0Lm7i+nbzzmHVtK32+cGbbm7qrSXftRq1J9Czf/9B/V80Olv"
        "esFgjT21p3pwempO5cpZpsXW5Elx+ji9LmFe2k1fvVsbjd9ufy+8Y8OrGwrOXzz3W8ETM5bXpe7RqXeDntRrnf6C6TFjd3MR"
        "7lOK1nuk7vihW3R3yVOObFI0I/dtqi51WuoUTc3qfGPOnMyHEuOzc2fHp+VnVCvaUReq/RGXApqzjR1K5EElcoMSktfhzzug"
        "aM1btmrTu8J7zmmibfTv35/VRmo0oRr1V8uVkc9oNWFFnww+2vtg5yklhB4s/ZZ/5UjFLx/d/OCaNGPWrDR6Xgiep81clneu"
        "abOi3VeX2u1ma29RIs1bdlhnmTIqNZqRYZowFQ+MjnhH88v/Wkl0L3V1p/9kWFSD17vZ3FVpO7o+s60289GM2TMyH59Re/M6"
        "et80d9WbxbrYjrb2PXkNnWzuPVly2AvLE5ITvd52dlGvJtvR5r4XNd10kdVhMo/IeLs089NO/+d7L4d3K5q29CcUjYb0hGT2"
        "79fTk3Ym8/vD352euX/dhC+k06N++hkPkSZKZpdHlvTJSfRxZhyhePRoYqJEDaJjFtlMBzJc7gqHbPVJCTrdpIkJugScXeTz"
        "uVPi48vKyuIW2y2yy2Fyxrk8tnjcN67IV+Kgc1xun93l9KZIZlOhyWzQSR7ZatBLFrnQ4TIXG3Qp9EcyOU2OCq+Mb1KJbLDY"
        "TZK3tJA+6SS3t4JOp99Gj8Wgj9PRKfRLKrGXyxYj7oUrjB6T0yYb9MmSucjjKjEZ6VK95PPIDofdS2dMLp9sMfvog3lRCf22"
        "yCbLEpdTNiToJ+j1ktXk9Rnd3mK7my7iN1jkNrqsVq+Mi3xFHrrASwcdLlexqYi+GAXzOuxmWQCd5PSojzDbaadAGXanT/ZQ"
        "c2QL8UJHqcdUYTS7StwmtSBaG5/HZHfSLehEjwnnWD2mEhm3KpPttiKfmz4VyxV02JCQ1PvRWGJ3GpIkr1l2yuZS3Eq9HEvi"
        "kb1FWGizweyxSiWFtA5YSfpiSJgUp5MW4ekGXVwyfXTjNuq/pnJD8hT64PXJbkOiZHfTolLraM0TqUGLDDoYSRMu1/lT7hur"
        "GRRytm11FZmr5/qOgZrLdGT0eoBoFWh/IDDzHMB4FYRcIPCHHSBVBaHfEGgcApCngrAr2J6eAyhWQb9rBCrCACpV0L+HwMcr"
        "AdaqYMB1Aq2/AexUwcATBB7KBehSwaDjBMaPb1ulaI4itP3SNkjT1+D4CfV4+JcEN7cBXFJBxBkCv35JQMuk3fIBgcVvAzBp"
        "t35CYPgnAEzabe8T2J0FwKQN7iIQmA7ApEW+QuDCrQBM2pANBFaXAjBpt79EYOoNqlPbyOtMVevUMqV3rCE4bxkAUxpFudYc"
        "vwjAlEbXEHi3EYBJG7oa3RoGwKTdWUfAupBACJM2bBuByvcBmLS7thD4sROASRu+k8D8BwCYtJhdBBJnAzBpdx8gsGckFR4y"
        "nxe+MHIbjjOl97xL8KsFAEzpvfsJ2I8DMGkjOnDZDgAmTboVPXsLgEn7Uzi6egyASRsZiibNAGDSRmGz3jyNQCiTNnoImvQY"
        "AJM2ZijaOI7qDJV4nZVqnaFM6X0j0LNWAKb0/mHo6mkApnRsEiy9FIBJG5cA0/cHYNJip8LSDQBM2vhpMP01ACZtwjhYeiMA"
        "kzYxDqa/AMCkxd0PSxejzou8zpbIbdjWM3yd/rH58/O7q0IvieTFQ83Hd4jk6Z5HDyWAWBXol6DL80XyErzo4d9E8ib50OXX"
        "AJ5RQaIJTTsikpdkRZcPi+Qlu1BbEsAOFTxQhLbmiORNzoTFf0DyjnAhXeqC8+RNSUcmXgT4QQUpj8Diw0Xyps5CJgpF8qYV"
        "wOKDAZg0w9MIQZlI3vR5sHiPSN6DcxCCWgAmLTWWQP4hkby0iQRSgkjeKl7nWbVOnrz00QQbHgFgSjNGETg/SSRvRjIB29Mi"
        "eZl6AhH3ATBpWZMJdO4WyXvoQQKfnRTJm3k7gaRFAExadjSBgkEieQ/fTeCygqDlsTo3aljQmNJHYggq/wZgSmfdRiBsjUhe"
        "ziACRT+K5D2K+5yxADBpswcQ6LhbJG/OAgJN8SJ5jz1F4MY8ACbt8bkEsr8WycvNJTDmVZG8uVkEWj6Eo+/hhUsseUxpXhrB"
        "Y2+K5OXPJFCeIpI3bzaBqHQAJm0+XpSvfiuSVyATaH5FJG+Bg0BsNACT9kQxgawSkbwnlxIIakTynqog0F6OOr/ldaby5Cmd"
        "/ifHVy7srhpwQiTvabw3xvwCMFQFxjICZXVi5i38ED1cJ5Jn+hhd/gkgXwWF76FpVjHzzEF0+V6RPMtJNM0LsE4F8qdoa4SY"
        "edYv0LRqkTzb12jr70hekAthW7LmpHq86Coc/6SYefZ/IhOjRfKe+QMW3wXApBX/jhB8Lmae4ydY/IBIXsn3CMFfAZg051lY"
        "PFvMPFc3QqAXyXMfRNNCkLx6XifbkrVM6aLD6PISMfM8b6GHV0XyvHvR5RUATJpvO3rYLWZeaSu6vFkkb/FraNKdAExaWTva"
        "6BIzr7wKFj8qklexDCHoQPJyeZ0tLHlM6ZKVcPxkMfOehZzsVJG855ph8YkATNrz65GJPDHzlmLqR30lkvfCywjBtrbGqhAm"
        "LVCJZmY5QZi2gAL3xA4lwrMXqILBmptBmLpANTx49Tu4OoYXj224sXfuBfxwS1k9CJMbWAZDxfwKwgQGauC59mdBmMJALWwZ"
        "DAVhEgN1sMiYrSBMY2A5XJR9BoSJDKyA0W7MBWEqA/XwYtMEEC5zJWwSlYaCL/CCz/IYtnX6p9UOKuyuiuiiC3gMA6tgtPIp"
        "IGzDCTTAi8f2gHCRq2HXlg9AuMhGWEf5DwjbZAJNcNflKhAu8kUYsCAchIt8CZZN8oCwfSawBvbpGAHCRa6Fw87YEL8uPlA0"
        "6orzeAbWwZNFP4OwnSfwMmwb9jIIb+2fYaHzOiI8koH1cFnDTBAucwN8mYKl4KEMbIR1898B4TI3wUafnQDhMl+B0zrfAOEy"
        "m2HGiDEgXOZm+NX2FJJZ1/vWrErgMzHQghmYnQHCVbdiTI6ZCsJlbsFgbdoLwmW2Yfbe+AiEy9yKOVi+HZ7mMrdhVEb9A4TL"
        "3I5p2pIPwmW+ioF7LA6Ey3wN3o5djojO6X19VgvmwzHwOqZn1hUQrnoHBuzVChCueidmcLMWhMvchXkY4wDhMt/A3cuiQLjM"
        "3ZiqwU0gXGY7Bm/7N32C2oF9o+FUn6Duwdg83w7CZb6JyZp/P3w/rM+LtAjqXsziFGOfoL6FudiZAMJl7sPo/OzhPkF9G9PV"
        "FugT1P2YxxEHQbjMdzAbL9/TJ6gHMD4VuU9QD2LCJl0G4TIPYQgXrEXBZ8UbNYKaRm+q4U3Zru6qwTv7BPUvmI9nrvcJ6mGM"
        "0I5KEPYuEHgXQzhsYJ+gdmJOF7lFUIOV2HsOFoOw14Gggv3p5B0iqMEq7GGFG0VQg9XY5267AMLeCIJ+bI31DQjqYfGqLYIa"
        "XIbdtPuaCGqwBjtu7lIQ9voTrMWu/GB/EdRgHfaa060iqMHl2I/2nQZhMoMrsGLax0RQg/XY9krGiaAGV2JrvDgDhMtche3T"
        "P61lbSuiqum5vmJgsAH/Cbm4YKPS77/+MzuS"
    ),
    "mpeg4.avi": (
        "eNoL8nRzKxJnYHAM81Tw8QwOsRBiYMhIKcpJLMvMsGBgYFBYyM6wIpEBDAQ4GRjYIEwGRogIEDKAMToAmfUAKFFcUpQDxGCz"
        "yjJTit18A0yQ1YHMYYKyQWbbA/F/IIDJg2wA6k/TALI1oHYJgPVJMIDNYsa02yvUz1sCqIgFyjcwSElmGAWjYBSMglEwCkbB"
        "KBgFo2AUjIJRMApGwYgCZQVFBS5IfND4A2JcgRGJjRDHNc4BGmtgASrMT8nNAaKMHyM4XEFjPlJA2tPPzd8z2C2EFySWWJZm"
        "ZqxnqGdoYAQJrR/MoylwFIyCkVpCzAHSufllmaBRWXuwKOMGYAHKuLVTGFLkMiowHOntYBBlaGESSQZyNwHLkGREGcK4mUGA"
        "HUhtE2OVUL5dBx7dZYeYsy2eyRyFn80oTbJ8ZkqFYQIDZNQYVOKDRpHtGRCjyD5AzI7Ej0Hj56Dxa9D4PVA+AEt6Vqk="
    ),
}


def _file(name: str) -> bytes:
  return zlib.decompress(base64.b64decode("".join(_FILES[name])))


# name: (mime, expected seconds, relative tolerance). Exact values are the
# container's own numbers; the tolerances mark the estimates.
EXPECTED = {
    "wav_s16.wav": ("audio/wav", 1.25, 0),
    "wav_ext.wav": ("audio/x-wav", 0.75, 0),  # 5.1, WAVE_FORMAT_EXTENSIBLE
    "wav_f32.wav": ("audio/wave", 0.5, 0),  # IEEE float
    "stream.wav": ("audio/wav", 1.5, 0),  # piped: RIFF and data sizes are 0xFFFFFFFF
    "rf64.wav": ("audio/vnd.wave", 1.5, 0),  # RF64 with a ds64 chunk
    "aiff.aiff": ("audio/aiff", 16538 / 11025, 0),
    "flac.flac": ("audio/flac", 3.2, 0),
    "stream.flac": ("audio/flac", None, 0),  # piped: STREAMINFO total samples 0 = unknown
    # Info frame count less the LAME tag's encoder delay and padding: ffmpeg's gapless length.
    "mp3_cbr.mp3": ("audio/mpeg", 2.5, 0),
    "mp3_cbr_noxing.mp3": ("audio/mp3", 2664 * 8 / 8000, 0),  # no Info frame: bytes after ID3v2 * 8 / bitrate
    "mp3_vbr.mp3": ("audio/mpeg", 4.0, 0),  # Xing, MPEG-2 22.05 kHz
    "mp3_44k.mp3": ("audio/mpeg", 61.0, 0),  # MPEG-1 44.1 kHz, a minute long
    "mp3_id3.mp3": ("audio/mpeg", 1.0, 0),  # ID3v2 before, ID3v1 after
    "mp2.mp2": ("audio/mpeg", 4032 * 8 / 32000, 0),  # Layer II, CBR estimate
    "adts.aac": ("audio/aac", 17 * 1024 / 8000, 0),  # every frame walked: exact
    "adts_30s.aac": ("audio/aac", 30.02, 0.005),  # 256 frames walked, the rest extrapolated
    "vorbis.ogg": ("audio/ogg", 2.2, 0),
    "opus.opus": ("audio/opus", 1.7, 0),  # granule less pre-skip
    "long_opus.ogg": ("audio/ogg", 12.3, 0),
    "flac.oga": ("audio/ogg", 1.3, 0),  # FLAC in Ogg
    "aac.m4a": ("audio/mp4", 2.0, 0),  # moov at the end
    "aac_faststart.m4a": ("audio/x-m4a", 2.0, 0),  # moov first
    # Fragmented, no duration in moov: last fragment's tfdt + sample durations
    # (includes AAC's 1,024 priming samples, as ffmpeg reports).
    "frag.m4a": ("audio/m4a", 3.128, 0),
    "frag_av.mp4": ("video/mp4", 4.42138671875, 0),
    "h264.mp4": ("video/mp4", 3.5, 0),
    "h264.mov": ("video/quicktime", 2.0, 0),
    "vp8.webm": ("video/webm", 2.5, 0),
    "opus.webm": ("audio/webm", 1.908, 0),
    "live.webm": ("audio/webm", 6.308, 0),  # ffmpeg -live 1: no Duration, last block's start
    "av.mkv": ("video/x-matroska", 4.4, 0),
    "mpeg4.avi": ("video/avi", 3.0, 0),
}


def _approx(expected: float | None, rel: float) -> object:
  return None if expected is None else pytest.approx(expected, rel=rel or 1e-9)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_files(name):
  mime, expected, rel = EXPECTED[name]
  assert media_duration(_file(name), mime) == _approx(expected, rel)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_input_type_agrees(name):
  mime, expected, rel = EXPECTED[name]
  data = _file(name)
  b64 = base64.b64encode(data).decode()
  want = _approx(expected, rel)
  assert media_duration(bytearray(data), mime) == want
  assert media_duration(memoryview(data), mime) == want
  assert media_duration(b64, mime) == want  # genai JSON dumps carry base64 text
  assert media_duration(base64.urlsafe_b64encode(data).decode().rstrip("="), mime) == want


def test_base64_that_offsets_cannot_address_is_unknown():
  data = _file("wav_s16.wav")
  assert media_duration(base64.encodebytes(data).decode(), "audio/wav") is None  # line-wrapped
  assert media_duration("A", "audio/wav") is None
  assert media_duration("é" + base64.b64encode(data).decode(), "audio/wav") is None


def test_non_contiguous_memoryview_and_other_types_are_unknown():
  data = _file("wav_s16.wav")
  assert media_duration(memoryview(data)[::2], "audio/wav") is None
  assert media_duration(None, "audio/wav") is None
  assert media_duration(12, "audio/wav") is None
  assert media_duration(data, None) is None
  assert media_duration(data, "image/png") is None
  assert media_duration(data, "text/plain") is None


def test_mime_parameters_and_case_do_not_matter_for_containers():
  assert media_duration(_file("flac.flac"), "Audio/FLAC; codecs=flac") == 3.2
  assert media_duration(_file("vorbis.ogg"), "application/ogg") == 2.2


def test_magic_wins_over_a_wrong_label():
  assert media_duration(_file("flac.flac"), "audio/mpeg") == 3.2
  assert media_duration(_file("aac.m4a"), "audio/aac") == 2.0  # "audio/aac in mp4"
  assert media_duration(_file("h264.mp4"), "video/3gpp") == 3.5


_MUTAGEN_SAME_MEANING = [
    "wav_s16.wav", "wav_ext.wav", "wav_f32.wav", "aiff.aiff", "flac.flac", "mp3_cbr_noxing.mp3",
    "mp2.mp2", "vorbis.ogg", "opus.opus", "long_opus.ogg", "flac.oga", "h264.mp4", "h264.mov",
]


@pytest.mark.parametrize("name", _MUTAGEN_SAME_MEANING)
def test_mutagen_agrees(name):
  """An independent pure-Python parser reads the same duration.

  Left out on purpose: LAME tags written by ffmpeg ("Lavf", which mutagen
  ignores, so it reports the padded length), AAC in MP4 (mutagen reads the
  track's mdhd, which includes encoder priming), fragmented MP4 (mutagen says
  0), ADTS (mutagen's own estimate), WebM and AVI (unsupported by mutagen).
  """
  mutagen = pytest.importorskip("mutagen")
  fileobj = io.BytesIO(_file(name))
  fileobj.name = name  # mutagen picks MP2 by extension: it has no magic
  info = mutagen.File(fileobj).info
  mime = EXPECTED[name][0]
  assert media_duration(_file(name), mime) == pytest.approx(info.length, rel=1e-9)


# ---------------------------------------------------------------------------
# WAV, built with the stdlib
# ---------------------------------------------------------------------------


def _wav(seconds: float, rate: int = 16000, channels: int = 1, width: int = 2) -> bytes:
  out = io.BytesIO()
  with wave.open(out, "wb") as w:
    w.setnchannels(channels)
    w.setsampwidth(width)
    w.setframerate(rate)
    w.writeframes(bytes(int(seconds * rate) * channels * width))
  return out.getvalue()


def _riff(*chunks: bytes, form: bytes = b"WAVE") -> bytes:
  body = form + b"".join(chunks)
  return b"RIFF" + struct.pack("<I", len(body)) + body


def _chunk(cid: bytes, payload: bytes, declared: int | None = None) -> bytes:
  size = len(payload) if declared is None else declared
  return cid + struct.pack("<I", size) + payload + (b"\0" if len(payload) % 2 else b"")


def _fmt(tag: int = 1, channels: int = 1, rate: int = 16000, width: int = 2, extensible: bool = False) -> bytes:
  align = channels * width
  base = struct.pack("<HHIIHH", 0xFFFE if extensible else tag, channels, rate, rate * align, align, width * 8)
  if extensible:
    guid_tail = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
    base += struct.pack("<HHI", 22, width * 8, 0x4) + struct.pack("<H", tag) + guid_tail
  return _chunk(b"fmt ", base)


def test_ten_minute_wav_costs_its_real_length():
  data = _wav(600)
  seconds = media_duration(data, "audio/wav")
  assert seconds == 600.0
  assert seconds * AUDIO_TOKENS_PER_SECOND == 19_200  # not the 60-second guess's 1,920


def test_three_second_clip_is_not_the_60_second_guess():
  assert media_duration(_wav(3, rate=8000), "audio/x-wav") == 3.0


@pytest.mark.parametrize("channels,width,rate", [(1, 1, 8000), (2, 2, 44100), (6, 3, 48000), (1, 4, 22050)])
def test_wav_layouts(channels, width, rate):
  assert media_duration(_wav(1.5, rate, channels, width), "audio/wav") == pytest.approx(1.5)


def test_wav_chunks_before_data_are_walked_with_odd_padding():
  plain = _wav(2.0)
  fmt_and_data = plain[12:]
  # LIST (odd size, so a pad byte), then a junk chunk, between fmt and data.
  fmt_end = 8 + struct.unpack("<I", fmt_and_data[4:8])[0]
  listed = _chunk(b"LIST", b"INFOISFT\x05\x00\x00\x00Lavf\x00")  # 21 bytes + pad
  junk = _chunk(b"junk", bytes(7))
  body = fmt_and_data[:fmt_end] + listed + junk + fmt_and_data[fmt_end:]
  data = b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body
  assert media_duration(data, "audio/wav") == 2.0
  with wave.open(io.BytesIO(data)) as w:  # the stdlib agrees the layout is valid
    assert w.getnframes() / w.getframerate() == 2.0


def test_wav_extensible_and_fact():
  pcm = bytes(16000 * 2 * 2)
  assert media_duration(_riff(_fmt(channels=2, extensible=True), _chunk(b"data", pcm)), "audio/wav") == 1.0
  # Compressed (IMA ADPCM, tag 0x11): the fact chunk's sample count is exact.
  adpcm = _chunk(b"fmt ", struct.pack("<HHIIHHHH", 0x11, 1, 8000, 4055, 256, 4, 2, 505))
  data = _riff(adpcm, _chunk(b"fact", struct.pack("<I", 20000)), _chunk(b"data", bytes(10000)))
  assert media_duration(data, "audio/wav") == 2.5
  without_fact = _riff(adpcm, _chunk(b"data", bytes(8110)))
  assert media_duration(without_fact, "audio/wav") == pytest.approx(2.0)  # bytes / byte rate


def test_wav_streaming_and_truncated_sizes_count_the_bytes_present():
  pcm = bytes(16000 * 2 * 3)
  streaming = _riff(_fmt(), b"data" + struct.pack("<I", 0xFFFFFFFF) + pcm)
  assert media_duration(streaming, "audio/wav") == 3.0
  cut = _riff(_fmt(), b"data" + struct.pack("<I", 10**9) + pcm)  # declared 10^9, 96,000 present
  assert media_duration(cut, "audio/wav") == 3.0
  assert media_duration(_wav(3.0)[:44 + 32000], "audio/wav") == 1.0


def test_rf64_takes_the_ds64_size():
  pcm = bytes(16000 * 2)
  ds64 = _chunk(b"ds64", struct.pack("<QQQI", 0, len(pcm), 16000, 0))
  data = b"RF64" + b"\xff\xff\xff\xff" + b"WAVE" + ds64 + _fmt() + b"data\xff\xff\xff\xff" + pcm
  assert media_duration(data, "audio/wav") == 1.0


@pytest.mark.parametrize("fmt", [
    _chunk(b"fmt ", struct.pack("<HHIIHH", 1, 1, 0, 0, 2, 16)),  # zero rate
    _chunk(b"fmt ", struct.pack("<HHIIHH", 0x55, 1, 8000, 0, 0, 0)),  # no byte rate, no fact
    _chunk(b"fmt ", b"\x01\x00"),  # truncated fmt
])
def test_wav_without_usable_rates_is_unknown(fmt):
  assert media_duration(_riff(fmt, _chunk(b"data", bytes(100))), "audio/wav") is None


def test_wav_missing_chunks_is_unknown():
  assert media_duration(_riff(_chunk(b"data", bytes(100))), "audio/wav") is None
  assert media_duration(_riff(_fmt()), "audio/wav") is None
  assert media_duration(_riff(_fmt(), _chunk(b"LIST", b"", declared=2**32 - 2)), "audio/wav") is None
  assert media_duration(b"RIFF\x00\x00\x00\x00WAVE", "audio/wav") is None


# ---------------------------------------------------------------------------
# Raw PCM: the MIME type is the only header
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("mime,size,expected", [
    ("audio/pcm;rate=16000", 32000, 1.0),
    ("audio/pcm;rate=24000", 48000 * 10, 10.0),  # Gemini Live's output rate
    ("audio/L16;rate=16000;channels=1", 64000, 2.0),
    ("audio/l16; rate=8000; channels=2", 64000, 2.0),
    ("audio/L8;rate=8000", 4000, 0.5),
    ("audio/L24;rate=48000;channels=2", 288000, 1.0),
    ("audio/pcm;rate=16000", 32001, 1.0),  # a trailing odd byte is no sample
    ("audio/pcm", 32000, None),  # no rate: unknowable
    ("audio/pcm;rate=0", 32000, None),
    ("audio/pcm;rate=16000;channels=0", 32000, None),
    ("audio/pcm;rate=-5", 32000, None),
    ("audio/pcm;rate=fast", 32000, None),
    ("audio/pcm;rate=16000.5", 32000, None),
    ("audio/pcm;rate=" + "9" * 400, 32000, None),
])
def test_raw_pcm(mime, size, expected):
  assert media_duration(bytes(size), mime) == expected


# ---------------------------------------------------------------------------
# FLAC
# ---------------------------------------------------------------------------


def _flac(rate: int, total: int, channels: int = 1, bits: int = 16) -> bytes:
  packed = (rate << 44) | ((channels - 1) << 41) | ((bits - 1) << 36) | total
  streaminfo = struct.pack(">HH", 4096, 4096) + bytes(6) + packed.to_bytes(8, "big") + bytes(16)
  return b"fLaC" + bytes([0x80]) + (34).to_bytes(3, "big") + streaminfo


def test_flac_streaminfo():
  assert media_duration(_flac(44100, 44100 * 90), "audio/flac") == 90.0
  assert media_duration(_flac(655350, 2**36 - 1), "audio/x-flac") == pytest.approx((2**36 - 1) / 655350)
  assert media_duration(b"ID3\x03\x00\x00\x00\x00\x00\x05" + bytes(5) + _flac(8000, 4000), "audio/flac") == 0.5


def test_flac_unknown_cases():
  assert media_duration(_flac(44100, 0), "audio/flac") is None  # total samples not recorded
  assert media_duration(_flac(0, 1000), "audio/flac") is None
  assert media_duration(_flac(8000, 4000)[:30], "audio/flac") is None
  bad_first_block = bytearray(_flac(8000, 4000))
  bad_first_block[4] = 0x84  # the first block must be STREAMINFO
  assert media_duration(bytes(bad_first_block), "audio/flac") is None


# ---------------------------------------------------------------------------
# MP3 (MPEG-1 Layer III, 128 kbit/s, 44.1 kHz, joint stereo: 417-byte frames)
# ---------------------------------------------------------------------------

_MP3_HEADER = b"\xff\xfb\x90\x64"
_MP3_FRAME = _MP3_HEADER + bytes(413)
_SPF = 1152 / 44100


def test_mp3_cbr_estimate():
  data = _MP3_FRAME * 2000
  assert media_duration(data, "audio/mpeg") == pytest.approx(len(data) * 8 / 128000)
  assert media_duration(data, "audio/mpeg") == pytest.approx(2000 * _SPF, rel=0.01)


def test_mp3_skips_id3_junk_false_syncs_and_id3v1():
  id3 = b"ID3\x04\x00\x00\x00\x00\x02\x00" + bytes(256)
  junk = b"\x00\xff\xfb\x90\x64\x00" + b"\xff" * 10  # a lone header the next frame does not confirm
  tail = b"TAG" + bytes(125)
  data = id3 + junk + _MP3_FRAME * 100 + tail
  assert media_duration(data, "audio/mpeg") == pytest.approx(100 * 417 * 8 / 128000)


def _xing(frames: int, flags: int = 0xF, lame: bytes = b"") -> bytes:
  xing = b"Xing" + struct.pack(">I", flags)
  if flags & 1:
    xing += struct.pack(">I", frames)
  xing += (b"\0" * 4 if flags & 2 else b"") + (bytes(100) if flags & 4 else b"") + (b"\0" * 4 if flags & 8 else b"")
  frame = _MP3_HEADER + bytes(32) + xing + lame
  return frame + bytes(417 - len(frame))


def test_mp3_xing_frame_count_is_exact():
  data = _xing(1000) + _MP3_FRAME * 50  # a header says 1,000 frames: trust it over the bytes
  assert media_duration(data, "audio/mpeg") == pytest.approx(1000 * _SPF)
  delay_padding = ((576 << 12) | 1000).to_bytes(3, "big")
  lame = b"LAME3.100" + bytes(12) + delay_padding
  assert media_duration(_xing(1000, lame=lame) + _MP3_FRAME * 50, "audio/mpeg") == pytest.approx(
      (1000 * 1152 - 1576) / 44100)
  assert media_duration(_xing(0, flags=0x1) + _MP3_FRAME * 50, "audio/mpeg") == pytest.approx(
      51 * 417 * 8 / 128000)  # zero frames: fall back to the estimate
  assert media_duration(_xing(0, flags=0x6) + _MP3_FRAME * 50, "audio/mpeg") == pytest.approx(
      51 * 417 * 8 / 128000)  # no frame count at all


def test_mp3_vbri_frame_count_is_exact():
  vbri = b"VBRI" + struct.pack(">HHHII", 1, 0, 75, 0, 777)
  frame = _MP3_HEADER + bytes(32) + vbri
  data = frame + bytes(417 - len(frame)) + _MP3_FRAME * 10
  assert media_duration(data, "audio/mpeg") == pytest.approx(777 * _SPF)


def test_mp3_unknown_cases():
  free_format = b"\xff\xfb\x00\x64" + bytes(400)
  assert media_duration(free_format * 10, "audio/mpeg") is None
  assert media_duration(bytes(10000), "audio/mpeg") is None
  assert media_duration(b"ID3\x04\x00\x00\x7f\x7f\x7f\x7f" + _MP3_FRAME, "audio/mpeg") is None  # tag past the end
  assert media_duration(b"\xff" * 100000, "audio/mp3") is None


# ---------------------------------------------------------------------------
# Ogg, paged by hand (the reader trusts structure, not CRCs)
# ---------------------------------------------------------------------------


def _page(body: bytes, granule: int, serial: int = 7, flags: int = 0, seq: int = 0) -> bytes:
  lacing = [255] * (len(body) // 255) + [len(body) % 255]
  return (b"OggS\x00" + bytes([flags]) + struct.pack("<qII", granule, serial, seq) + bytes(4)
          + bytes([len(lacing)]) + bytes(lacing) + body)


_OPUS_HEAD = b"OpusHead\x01\x01" + struct.pack("<HIhB", 312, 16000, 0, 0)
_VORBIS_ID = b"\x01vorbis" + struct.pack("<IBIiiiBB", 0, 1, 22050, 0, 64000, 0, 0xB8, 1)


def test_ogg_opus_last_granule_less_pre_skip():
  data = _page(_OPUS_HEAD, 0, flags=2) + _page(b"x" * 300, 48000 * 3) + _page(b"y" * 10, 48000 * 5 + 312, flags=4)
  assert media_duration(data, "audio/ogg") == 5.0
  assert media_duration(data, "audio/opus") == 5.0


def test_ogg_skips_pages_ending_no_packet_other_streams_and_cut_pages():
  head = _page(_VORBIS_ID, 0, flags=2)
  last = _page(b"a" * 100, 22050 * 4)
  continued = _page(b"b" * 100, -1)  # no packet ends here
  other = _page(b"c" * 100, 10**9, serial=99)  # a multiplexed stream's page
  cut = _page(b"d" * 200, 22050 * 6)[:-50]  # truncated: its granule is not reached
  assert media_duration(head + last + continued + other + cut, "audio/ogg") == 4.0


def test_ogg_last_page_far_from_the_end_is_still_found():
  data = _page(_VORBIS_ID, 0, flags=2) + _page(b"a" * 100, 22050 * 9) + _page(bytes(60000), 5, serial=99) * 40
  assert media_duration(data, "audio/ogg") == 9.0


def test_ogg_unknown_cases():
  assert media_duration(_page(_OPUS_HEAD, 0, flags=2), "audio/ogg") == 0.0  # header only: nothing yet
  assert media_duration(_page(_VORBIS_ID, 0, flags=2) + _page(b"a", -5), "audio/ogg") is None
  zero_rate = _VORBIS_ID[:12] + bytes(4) + _VORBIS_ID[16:]
  assert media_duration(_page(zero_rate, 0, flags=2) + _page(b"a", 100), "audio/ogg") is None
  assert media_duration(_page(b"\x80theora" + bytes(40), 0, flags=2) + _page(b"a", 100), "video/ogg") is None
  assert media_duration(_page(b"OpusHead", 0, flags=2) + _page(b"a", 100), "audio/ogg") is None  # cut header
  assert media_duration(b"OggS" + bytes(100), "audio/ogg") is None


# ---------------------------------------------------------------------------
# MP4 / MOV boxes
# ---------------------------------------------------------------------------


def _box(kind: bytes, payload: bytes = b"", large: bool = False) -> bytes:
  if large:
    return struct.pack(">I", 1) + kind + struct.pack(">Q", 16 + len(payload)) + payload
  return struct.pack(">I", 8 + len(payload)) + kind + payload


def _mvhd(scale: int, duration: int, version: int = 0) -> bytes:
  if version:
    times = struct.pack(">QQIQ", 0, 0, scale, duration)
  else:
    times = struct.pack(">IIII", 0, 0, scale, duration)
  return _box(b"mvhd", bytes([version, 0, 0, 0]) + times + bytes(80))


def _mdhd(scale: int, duration: int) -> bytes:
  return _box(b"mdhd", bytes(4) + struct.pack(">IIII", 0, 0, scale, duration) + bytes(4))


_FTYP = _box(b"ftyp", b"isom\x00\x00\x02\x00isomiso2mp41")


def test_mp4_mvhd_versions_and_moov_position():
  assert media_duration(_FTYP + _box(b"moov", _mvhd(1000, 90500)) + _box(b"mdat", bytes(64)), "video/mp4") == 90.5
  long = _mvhd(90000, 90000 * 3600 * 30, version=1)  # 30 hours needs 64 bits
  assert media_duration(_FTYP + _box(b"moov", long), "video/mp4") == 108000.0
  moov_last = _FTYP + _box(b"mdat", bytes(100000), large=True) + _box(b"free") + _box(b"moov", _mvhd(600, 1200))
  assert media_duration(moov_last, "video/quicktime") == 2.0
  old_mov = _box(b"wide") + _box(b"mdat", bytes(10)) + _box(b"moov", _mvhd(600, 300))
  assert media_duration(old_mov, "video/quicktime") == 0.5


def test_mp4_unknown_movie_duration_falls_back_to_tracks():
  trak = _box(b"trak", _box(b"mdia", _mdhd(44100, 44100 * 7)))
  data = _FTYP + _box(b"moov", _mvhd(1000, 0xFFFFFFFF) + trak)
  assert media_duration(data, "audio/mp4") == 7.0
  mehd = _box(b"mvex", _box(b"mehd", bytes(4) + struct.pack(">I", 12000)))
  assert media_duration(_FTYP + _box(b"moov", _mvhd(1000, 0) + mehd), "audio/mp4") == 12.0


def test_mp4_unknown_cases():
  assert media_duration(_FTYP + _box(b"moov", _mvhd(0, 1000)), "video/mp4") is None
  assert media_duration(_FTYP + _box(b"mdat", bytes(100)), "video/mp4") is None  # moov cut off
  assert media_duration(_FTYP + struct.pack(">I", 3) + b"moov", "video/mp4") is None  # size below header
  assert media_duration(_FTYP + _box(b"moov", _mvhd(1000, 5000))[:30], "video/mp4") is None
  # A box claiming to run to the end (size 0) is fine.
  assert media_duration(_FTYP + struct.pack(">I", 0) + b"moov" + _mvhd(10, 25), "video/mp4") == 2.5


# ---------------------------------------------------------------------------
# Matroska / WebM
# ---------------------------------------------------------------------------


def _el(eid: int, payload: bytes, unknown: bool = False) -> bytes:
  size = b"\x01\xff\xff\xff\xff\xff\xff\xff" if unknown else (0x0100000000000000 | len(payload)).to_bytes(8, "big")
  return eid.to_bytes((eid.bit_length() + 7) // 8, "big") + size + payload


_EBML_HEAD = _el(0x1A45DFA3, _el(0x4282, b"webm"))


def test_webm_info_duration_float32_and_scale():
  info = _el(0x1549A966, _el(0x2AD7B1, (100000).to_bytes(3, "big")) + _el(0x4489, struct.pack(">f", 12345.0)))
  data = _EBML_HEAD + _el(0x18538067, info + _el(0x1F43B675, _el(0xE7, b"\x00")), unknown=True)
  assert media_duration(data, "video/webm") == pytest.approx(1.2345)  # 12,345 ticks of 100 us


def test_webm_info_after_clusters_via_seekhead():
  cluster = _el(0x1F43B675, _el(0xE7, b"\x00") + _el(0xA3, b"\x81\x00\x00\x80"))
  seek_len = len(_el(0x114D9B74, _el(0x4DBB, _el(0x53AB, b"\x15\x49\xa9\x66") + _el(0x53AC, bytes(8)))))
  info_pos = seek_len + len(cluster)
  seek = _el(0x114D9B74, _el(0x4DBB, _el(0x53AB, b"\x15\x49\xa9\x66") + _el(0x53AC, info_pos.to_bytes(8, "big"))))
  info = _el(0x1549A966, _el(0x4489, struct.pack(">d", 2500.0)))
  data = _EBML_HEAD + _el(0x18538067, seek + cluster + info)
  assert media_duration(data, "audio/webm") == 2.5


def _unknown_size_clusters(data: bytes) -> bytes:
  """Rewrites each Cluster's 2-byte size as "unknown", as browsers' MediaRecorder writes them."""
  out = bytearray(data)
  i = out.find(b"\x1f\x43\xb6\x75")
  while i >= 0:
    assert 0x40 <= out[i + 4] < 0x80
    out[i + 4 : i + 6] = b"\x7f\xff"
    i = out.find(b"\x1f\x43\xb6\x75", i + 4)
  return bytes(out)


def test_live_webm_without_duration_uses_the_last_block():
  data = _file("live.webm")
  assert media_duration(_unknown_size_clusters(data), "audio/webm") == pytest.approx(6.308)
  assert media_duration(data[: len(data) * 2 // 3], "audio/webm") == pytest.approx(4.2, abs=0.3)


def test_webm_block_group_duration_counts():
  group = _el(0xA0, _el(0xA1, b"\x81\x00\x64\x00") + _el(0x9B, b"\x32"))
  data = _EBML_HEAD + _el(0x18538067, _el(0x1F43B675, _el(0xE7, b"\x03\xe8") + group), unknown=True)
  assert media_duration(data, "video/webm") == pytest.approx(1.15)  # 1000 + 100 + 50 ms


def test_webm_unknown_cases():
  assert media_duration(_EBML_HEAD, "video/webm") is None
  assert media_duration(_EBML_HEAD + _el(0x18538067, _el(0x1549A966, b"")), "video/webm") is None
  nan = _el(0x1549A966, _el(0x4489, struct.pack(">d", math.nan)))
  assert media_duration(_EBML_HEAD + _el(0x18538067, nan), "video/webm") is None
  negative = _el(0x1549A966, _el(0x4489, struct.pack(">d", -5.0)))
  assert media_duration(_EBML_HEAD + _el(0x18538067, negative), "video/webm") is None
  zero_scale = _el(0x1549A966, _el(0x2AD7B1, b"\x00") + _el(0x4489, struct.pack(">d", 5.0)))
  assert media_duration(_EBML_HEAD + _el(0x18538067, zero_scale), "video/webm") is None
  assert media_duration(b"\x1a\x45\xdf\xa3\x00", "video/webm") is None


# ---------------------------------------------------------------------------
# Hostile input: never an error, never a nonsense number
# ---------------------------------------------------------------------------

_MIMES = sorted({m for m, _, _ in EXPECTED.values()} | {
    "audio/pcm;rate=16000", "audio/L16;rate=8000;channels=2", "video/ogg", "audio/x-flac", "video/3gpp"})
_MAGICS = [b"RIFF\x00\x00\x00\x00WAVE", b"RIFF\x00\x00\x00\x00AVI ", b"FORM\x00\x00\x00\x00AIFF", b"fLaC",
           b"OggS\x00\x02", b"\x1a\x45\xdf\xa3", b"\x00\x00\x00\x18ftyp", b"ID3\x04\x00\x00", b"\xff\xfb\x90\x64",
           b"\xff\xf1\x50\x80", b"RF64\xff\xff\xff\xffWAVEds64", b"\x00\x00\x00\x00moov"]


def _sane(value: object) -> bool:
  return value is None or (type(value) is float and math.isfinite(value) and value >= 0)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_truncation_is_sane(name):
  mime = EXPECTED[name][0]
  data = _file(name)
  cuts = sorted(set(range(0, min(len(data), 600))) | set(range(0, len(data), max(1, len(data) // 300))))
  for cut in cuts:
    assert _sane(media_duration(data[:cut], mime)), cut


@given(st.binary(max_size=2048), st.sampled_from(_MIMES))
def test_random_bytes_are_sane(data, mime):
  assert _sane(media_duration(data, mime))


@given(st.sampled_from(_MAGICS), st.binary(max_size=2048), st.sampled_from(_MIMES))
def test_magic_then_random_bytes_are_sane(magic, rest, mime):
  assert _sane(media_duration(magic + rest, mime))


@given(st.sampled_from(sorted(EXPECTED)), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=8),
       st.integers(0, 10**6))
def test_mutated_real_files_are_sane(name, flips, cut):
  data = bytearray(_file(name))
  for pos, value in flips:
    data[pos % len(data)] = value
  assert _sane(media_duration(bytes(data[: max(1, cut % (len(data) + 1))]), EXPECTED[name][0]))


def test_huge_declared_values_stay_finite():
  assert media_duration(_FTYP + _box(b"moov", _mvhd(1, 2**64 - 2, version=1)), "video/mp4") == float(2**64 - 2)
  assert media_duration(_riff(_fmt(rate=1), b"data" + struct.pack("<I", 10)), "audio/wav") == 0.0  # none present
  comm = struct.pack(">hIh", 1, 1000, 16) + b"\x7f\xfe" + b"\x80" + bytes(7)  # ~2^16383 Hz
  assert media_duration(b"FORM\x00\x00\x00\x00AIFF" + b"COMM" + struct.pack(">I", 18) + comm, "audio/aiff") is None


def test_hostile_nesting_gives_up_quickly():
  boxes = _FTYP + _box(b"moov", _box(b"free") * 200000) + _box(b"moof") * 200000
  spam_clusters = _EBML_HEAD + _el(0x18538067, (_el(0x1F43B675, _el(0xE7, b"\x00") + b"\xec\x80" * 2000)) * 400)
  avi = _riff(_chunk(b"LIST", b"hdrl" + _chunk(b"LIST", b"strl" + _chunk(b"JUNK", b"") * 3000) * 300), form=b"AVI ")
  for data, mime in ((boxes, "video/mp4"), (spam_clusters, "video/webm"), (avi, "video/avi")):
    start = time.perf_counter()
    assert media_duration(data, mime) is None
    assert time.perf_counter() - start < 1.0


# ---------------------------------------------------------------------------
# Header reads only: large payloads cost what small ones do
# ---------------------------------------------------------------------------


def _best_of(fn, repeat: int = 5) -> float:
  best = math.inf
  for _ in range(repeat):
    start = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - start)
  return best


def test_fifty_megabytes_cost_microseconds():
  wav = _riff(_fmt(), _chunk(b"data", bytes(50 * 2**20)))
  mp3 = b"ID3\x04\x00\x00\x00\x00\x02\x00" + bytes(256) + _MP3_FRAME * (50 * 2**20 // 417)
  ogg = _page(_OPUS_HEAD, 0, flags=2) + bytes(50 * 2**20) + _page(b"a", 48000 * 60 * 60)
  assert media_duration(wav, "audio/wav") == pytest.approx(50 * 2**20 / 32000)
  assert media_duration(mp3, "audio/mpeg") == pytest.approx((len(mp3) - 266) * 8 / 128000)
  assert media_duration(ogg, "audio/ogg") == pytest.approx(3600 - 312 / 48000)
  for data, mime in ((wav, "audio/wav"), (mp3, "audio/mpeg"), (ogg, "audio/ogg")):
    assert _best_of(lambda: media_duration(data, mime)) < 0.05, mime
