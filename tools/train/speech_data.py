"""Synthetic speech data: short English utterances spoken by espeak-ng, with questions about them.

Recipe (one numpy Generator per worker; a seed fixes every sample):
  content   numbers 0..9999 (40% below 100) 22%; digit strings of 3..7 digits 13%; 1..5 random words from WORDS 25%;
            sentences from TEMPLATES (names, colours, objects, places, devices, numbers) 40%. The transcript is the
            written text given to espeak-ng (numbers as digits, digit strings as "7 2 9").
  voices    espeak-ng 1.51 (Debian 12 packages, unpacked with dpkg -x; libpcaudio replaced by pcaudio_stub.c):
            VOICES x VARIANTS, rate 120..230 words/min, pitch 20..80, pitch range 20..90, word gap 0..2.
  audio     22050 Hz synthesis, 0..0.6 s of silence before and after, -> 16 kHz (torchaudio sinc resampling),
            peak 0.1..0.95, rough telephone band (12%), then white or brown noise at 5..40 dB SNR (85%).
            Training does the resampling, degradation and features on the GPU (GpuAudio: the same steps on a
            batch; every reuse of a synthesized clip gets new gain, band and noise).
  questions "Transcribe the audio." 42%, "What number was said?" 22%, "What is the first word?" 10%,
            "What is the last word?" 10%, "How many words were said?" 6% (random words only), paraphrases of
            the transcription request 10% ("What was said?", "Write down what you hear.").
  features  WhisperFeatureExtractor (128 mel bins, 16 kHz, hop 160) exactly as Qwen3-Omni's processor calls it
            (GpuAudio.log_mel: its torch path on a padded batch; only the last frame of each clip can differ, as
            the STFT's reflection padding sees the batch's zero padding there).
"""

import ctypes
import os

import numpy as np

SR = 16000
VOICES = ["en-us", "en", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-029"]
VARIANTS = ["", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5", "klatt", "klatt2",
            "klatt3", "Andy", "Annie", "Denis", "Gene", "Jacky", "Lee", "Mario", "Michael", "Tweaky",
            "edward", "john", "linda", "max", "paul", "robert", "steph", "travis", "zac"]

COLORS = "red blue green yellow black white orange purple brown pink gray silver gold".split()
OBJECTS = ("car house book table chair window door phone computer bottle cup apple dog cat bird horse tree flower "
           "river mountain city street train plane boat bike key box ball clock lamp bed shoe shirt hat bag pen "
           "paper letter ticket camera radio garden kitchen bridge picture bread coffee water").split()
NAMES = ("Anna Ben Carl David Emma Frank Grace Henry Julia Kevin Laura Mike Nina Oscar Paul Rachel Sarah Tom "
         "Victor Walter Alice Bob Chris Diana").split()
PLACES = "table floor roof shelf desk bed box kitchen garden street car bag".split()
DEVICES = "lights radio heater fan television music alarm oven".split()
CITIES = "London Paris Berlin Tokyo Madrid Rome Boston Chicago Dublin Vienna Oslo Sydney".split()
EXTRA = ("hello yes no stop go left right up down open close start end good bad big small hot cold new old fast "
         "slow happy sad morning evening night today tomorrow yesterday please thank you sorry help water fire "
         "light dark music money time people friend family school work home food game story question answer "
         "number world house island forest ocean winter summer spring autumn street river window moon sun star "
         "cloud rain snow wind tea milk sugar salt bread cheese").split()
DIGIT_HOMOPHONES = {"for", "four", "to", "too", "two", "one", "won", "ate", "eight", "ten", "nine", "six", "seven",
                    "five", "three", "zero"}
WORDS = sorted(set(w.lower() for w in COLORS + OBJECTS + PLACES + DEVICES + EXTRA) - DIGIT_HOMOPHONES)

TEMPLATES = [
    "the {color} {object} is on the {place}", "{name} has {n} {objects}", "please call me at {n}",
    "set a timer for {n} minutes", "turn {onoff} the {device}", "I would like {n} {objects}",
    "the meeting starts at {hour} o'clock", "my number is {digits}", "{name} lives in {city}",
    "open the {object}", "where is my {color} {object}", "the train leaves in {n} minutes",
    "{name} and {name2} went to the {place}", "it costs {n} dollars", "go to room {n}",
    "{name} bought a {color} {object}", "the {object} is {color}", "call {name} at {hour} o'clock",
    "there are {n} {objects} in the {place}", "{name} is {n} years old",
]
QUESTIONS_TRANSCRIBE = ["Transcribe the audio.", "What was said?", "Write down what you hear."]
Q_NUMBER = "What number was said?"
Q_FIRST = "What is the first word?"
Q_LAST = "What is the last word?"
Q_COUNT = "How many words were said?"
NO_NUMBER = "No number was said."


def ri(rng, lo, hi=None):
    return int(rng.integers(lo, hi))


def plural(w):
    if w.endswith(("s", "sh", "ch", "x")):
        return w + "es"
    if w.endswith("y") and w[-2] not in "aeiou":
        return w[:-1] + "ies"
    return w + "s"


class UtteranceGen:
    """Random utterances {text, kind, number} and (question, answer) pairs."""

    def __init__(self, rng, subset=None):
        """subset "digits": only digit strings of 1..4 digits with the transcription question (a quick check that
        a model learns to transcribe at all)."""
        self.rng, self.subset = rng, subset

    def pick(self, xs):
        return xs[ri(self.rng, len(xs))]

    def number(self):
        r = self.rng
        return ri(r, 0, 100) if r.random() < 0.4 else ri(r, 0, 10000)

    def utterance(self):
        r = self.rng
        if self.subset == "digits":
            ds = [str(ri(r, 10)) for _ in range(ri(r, 1, 5))]
            return {"text": " ".join(ds), "kind": "digits", "number": "".join(ds)}
        u = r.random()
        if u < 0.22:
            n = self.number()
            return {"text": str(n), "kind": "number", "number": str(n)}
        if u < 0.35:
            ds = [str(ri(r, 10)) for _ in range(ri(r, 3, 8))]
            return {"text": " ".join(ds), "kind": "digits", "number": "".join(ds)}
        if u < 0.60:
            ws = [self.pick(WORDS) for _ in range(ri(r, 1, 6))]
            return {"text": " ".join(ws), "kind": "words", "number": None}
        t = self.pick(TEMPLATES)
        n = self.number() if "{n}" in t else None
        hour = ri(r, 1, 13) if "{hour}" in t else None
        digits = " ".join(str(ri(r, 10)) for _ in range(ri(r, 3, 8))) if "{digits}" in t else None
        obj = self.pick(OBJECTS)
        name = self.pick(NAMES)
        text = t.format(color=self.pick(COLORS), object=obj, objects=plural(obj) if n != 1 else obj,
                        place=self.pick(PLACES), name=name, name2=self.pick([x for x in NAMES if x != name]),
                        n=n, hour=hour, onoff=self.pick(["on", "off"]), device=self.pick(DEVICES),
                        digits=digits, city=self.pick(CITIES))
        num = str(n) if n is not None else (str(hour) if hour is not None else
                                            (digits.replace(" ", "") if digits else None))
        return {"text": text, "kind": "sentence", "number": num}

    def question(self, utt):
        r = self.rng
        u = r.random()
        words = utt["text"].split()
        if u < 0.42 or self.subset == "digits":
            return QUESTIONS_TRANSCRIBE[0], utt["text"]
        if u < 0.52:
            return self.pick(QUESTIONS_TRANSCRIBE[1:]), utt["text"]
        if u < 0.74:
            return Q_NUMBER, utt["number"] if utt["number"] is not None else NO_NUMBER
        if u < 0.84:
            return Q_FIRST, words[0]
        if u < 0.94 or utt["kind"] != "words":
            return Q_LAST, words[-1]
        return Q_COUNT, str(len(words))


class Espeak:
    """libespeak-ng through ctypes (synchronous synthesis into memory), from an unpacked Debian tree."""

    def __init__(self, root):
        libdir = os.path.join(root, "usr", "lib", "x86_64-linux-gnu")
        for dep in ("libpcaudio.so.0", "libsonic.so.0"):  # resolve the NEEDED entries by full path
            ctypes.CDLL(os.path.join(libdir, dep), mode=ctypes.RTLD_GLOBAL)
        lib = ctypes.CDLL(os.path.join(libdir, "libespeak-ng.so.1"))
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Synth.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint,
                                     ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self.rate = lib.espeak_Initialize(2, 0, libdir.encode(), 0)  # AUDIO_OUTPUT_SYNCHRONOUS
        if self.rate <= 0:
            raise RuntimeError("espeak_Initialize failed (data under %s?)" % libdir)
        self.chunks = []
        cbtype = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)

        def cb(wav, n, events):
            if n > 0:
                self.chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
            return 0
        self.cb = cbtype(cb)  # keep a reference
        lib.espeak_SetSynthCallback(self.cb)
        self.lib = lib

    def say(self, text, voice, rate, pitch, prange, gap):
        """-> int16 samples at self.rate."""
        if self.lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise ValueError("espeak-ng voice %r not found" % voice)
        for k, v in ((1, rate), (3, pitch), (4, prange), (7, gap)):  # RATE, PITCH, RANGE, WORDGAP
            self.lib.espeak_SetParameter(k, int(v), 0)
        self.chunks = []
        b = text.encode()
        self.lib.espeak_Synth(b, len(b) + 1, 0, 1, 0, 0, None, None)  # POS_CHARACTER, espeakCHARS_AUTO
        return np.concatenate(self.chunks) if self.chunks else np.zeros(0, np.int16)


def voice_params(rng):
    v = VOICES[ri(rng, len(VOICES))]
    var = VARIANTS[ri(rng, len(VARIANTS))]
    return {"voice": v + ("+" + var if var else ""), "rate": ri(rng, 120, 231), "pitch": ri(rng, 20, 81),
            "prange": ri(rng, 20, 91), "gap": ri(rng, 0, 3)}


class Resampler:
    """src Hz -> 16 kHz with torchaudio's windowed-sinc resampler (kernel built once)."""

    def __init__(self, src):
        import torch
        import torchaudio
        self.torch = torch
        self.rs = torchaudio.transforms.Resample(src, SR)

    def __call__(self, x):
        with self.torch.no_grad():
            return self.rs(self.torch.from_numpy(x.astype(np.float32))).numpy()


def pad_silence(rng, x, rate=SR):
    """0..0.6 s of silence before and after."""
    pre, post = (np.zeros(ri(rng, 0, int(0.6 * rate)), x.dtype) for _ in range(2))
    return np.concatenate([pre, x, post])


def degrade(rng, x):
    """Silence padding, gain, telephone band, noise (float32 16 kHz in/out)."""
    x = pad_silence(rng, x)
    x = x / max(1e-6, np.abs(x).max()) * rng.uniform(0.1, 0.95)
    if rng.random() < 0.12:  # rough telephone band: pre-emphasis high-pass, 3-tap low-pass
        x = np.convolve(x, np.array([1.0, -0.95], np.float32), mode="same")
        x = np.convolve(x, np.ones(3, np.float32) / 3, mode="same").astype(np.float32)
        x = x / max(1e-6, np.abs(x).max()) * rng.uniform(0.1, 0.95)
    if rng.random() < 0.85:
        sig = np.sqrt(np.mean(x ** 2) + 1e-12)
        snr = rng.uniform(5, 40)
        n = rng.standard_normal(len(x), dtype=np.float32)
        if rng.random() < 0.3:  # brown-ish noise
            n = np.cumsum(n)
            n -= np.convolve(n, np.ones(64, np.float32) / 64, mode="same")
            n /= np.sqrt(np.mean(n ** 2) + 1e-12)
        x = x + n * sig / (10 ** (snr / 20))
    return np.clip(x, -1, 1).astype(np.float32)


def resampled_length(n, src):
    """Samples after torchaudio's resampling of n samples from src Hz to 16 kHz."""
    return -(-n * SR // src)


class GpuAudio:
    """The training batch's audio on the device: int16 clips at the synthesis rate (right-padded) -> 16 kHz
    resampling, degrade()'s gain / telephone band / noise with fresh random draws, and log-mel features."""

    def __init__(self, src_rate, device, seed):
        import torch
        import torchaudio
        self.torch, self.src, self.dev = torch, src_rate, device
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(int(seed))
        self.rs = torchaudio.transforms.Resample(src_rate, SR).to(device)
        fe = feature_extractor()
        self.mel = torch.from_numpy(fe.mel_filters).to(device, torch.float32)  # [201, 128]
        self.window = torch.hann_window(400, device=device)

    def rand(self, *shape):
        return self.torch.rand(*shape, generator=self.gen, device=self.dev)

    def waves(self, pcm, lengths):
        """pcm int16 [B, L] at src_rate, lengths [B] -> (float32 [B, N] 16 kHz degraded, zero after each clip,
        16 kHz lengths [B])."""
        torch = self.torch
        n16 = (lengths * SR + self.src - 1) // self.src
        x = self.rs(pcm.float() / 32768.0)
        B, N = x.shape
        valid = torch.arange(N, device=self.dev)[None, :] < n16[:, None]
        x = x * valid

        def peak(v, gain):
            return v / v.abs().amax(1, keepdim=True).clamp_min(1e-6) * gain
        x = peak(x, 0.1 + 0.85 * self.rand(B, 1))
        tel = self.rand(B, 1) < 0.12  # rough telephone band: pre-emphasis high-pass, 3-tap low-pass
        y = x - 0.95 * torch.nn.functional.pad(x, (1, 0))[:, :-1]
        y = torch.nn.functional.avg_pool1d(torch.nn.functional.pad(y, (1, 1))[:, None], 3, 1)[:, 0] * valid
        x = torch.where(tel, peak(y, 0.1 + 0.85 * self.rand(B, 1)), x)
        sig = ((x * x).sum(1, keepdim=True) / n16[:, None]).add(1e-12).sqrt()
        noise = torch.randn(B, N, generator=self.gen, device=self.dev)
        br = noise.cumsum(1)  # brown-ish noise: integrated, minus its 64-sample moving average
        br = br - torch.nn.functional.avg_pool1d(torch.nn.functional.pad(br, (32, 31))[:, None], 64, 1,
                                                 count_include_pad=True)[:, 0]
        br = br / ((br * br * valid).sum(1, keepdim=True) / n16[:, None]).add(1e-12).sqrt()
        noise = torch.where(self.rand(B, 1) < 0.3, br, noise)
        snr = 5 + 35 * self.rand(B, 1)
        x = torch.where(self.rand(B, 1) < 0.85, x + noise * sig / 10 ** (snr / 20), x)
        return x.clamp(-1, 1) * valid, n16

    def log_mel(self, x, n16):
        """float32 [B, N] (zero after each clip) -> (features [B, 128, T] (zero after each clip), T per clip [B]):
        WhisperFeatureExtractor's torch path, the log-mel maximum taken per clip over its own frames."""
        torch = self.torch
        st = torch.stft(x, 400, 160, window=self.window, return_complex=True)
        mag = (st[..., :-1].abs() ** 2)  # [B, 201, F]
        lg = torch.clamp(self.mel.T @ mag, min=1e-10).log10()  # [B, 128, F]
        T = n16 // 160
        valid = torch.arange(lg.shape[2], device=self.dev)[None, :] < T[:, None]  # [B, F]
        mx = torch.where(valid[:, None, :], lg, torch.full_like(lg, -1e9)).amax((1, 2), keepdim=True)
        lg = (torch.maximum(lg, mx - 8.0) + 4.0) / 4.0
        return lg * valid[:, None, :], T


class Synth:
    """utterance text -> 16 kHz float32 waveform with random voice and degradation."""

    def __init__(self, root):
        self.es = Espeak(root)
        self.rs = Resampler(self.es.rate)

    def clean(self, text, vp):
        pcm = self.es.say(text, vp["voice"], vp["rate"], vp["pitch"], vp["prange"], vp["gap"])
        return self.rs(pcm.astype(np.float32) / 32768.0)

    def sample(self, rng, text):
        vp = voice_params(rng)
        return degrade(rng, self.clean(text, vp)), vp


def write_wav(path, x):
    """float32 16 kHz mono -> 16-bit PCM WAV."""
    import wave
    q = np.clip(np.round(np.asarray(x) * 32767.0), -32768, 32767).astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SR)
        w.writeframes(q.tobytes())


def read_wav(path):
    """16-bit mono 16 kHz WAV -> float32 (x / 32768, as libsndfile reads it)."""
    import wave
    with wave.open(path, "rb") as w:
        if w.getnchannels() != 1 or w.getsampwidth() != 2 or w.getframerate() != SR:
            raise ValueError("%s: expected 16-bit mono %d Hz" % (path, SR))
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768.0


def feature_extractor():
    from transformers import WhisperFeatureExtractor
    return WhisperFeatureExtractor(feature_size=128, sampling_rate=SR, hop_length=160, chunk_length=300, n_fft=400,
                                   padding_value=0.0, dither=0.0, return_attention_mask=True)


def log_mel(fe, wave):
    """[128, T] float32 (torch) exactly as Qwen3OmniMoeProcessor computes it for one clip."""
    r = fe(wave, sampling_rate=SR, padding=True, truncation=False, return_attention_mask=True, return_tensors="pt")
    T = int(r["attention_mask"][0].sum())
    return r["input_features"][0, :, :T].contiguous()


def audio_tokens(T, n_window=50):
    """Audio token count of T mel frames (Qwen3-Omni _get_feat_extract_output_lengths)."""
    r = T % (2 * n_window)
    a = (r - 1) // 2 + 1
    return ((a - 1) // 2 + 1 - 1) // 2 + 1 + (T // (2 * n_window)) * 13


def audio_tower_plan(frames, n_window=50, n_window_infer=800):
    """The audio tower's chunking of a batch, computed on the host (Python ints) exactly as Qwen3-Omni's
    chunk_and_pad_features / get_valid_indices / get_audio_cu_seqlens do it on the device, where they loop over the
    clips with ~3 host syncs each. frames: mel frames per clip -> dict of tensors for the tower's precomputed
    kwargs (chunk_lengths, valid_indices, cu_seqlens, max_seqlen) + chunk_src (index of each chunk in the
    [clips * max_chunks] grid of CHUNK-frame chunks, to cut padded_feature on the device: chunk_features)."""
    import torch
    chunk = 2 * n_window
    n_max = max(-(-f // chunk) for f in frames)
    lens, src = [], []
    for b, f in enumerate(frames):
        nc = -(-f // chunk)
        lens += [chunk] * (nc - 1) + [f - chunk * (nc - 1)]
        src += [b * n_max + c for c in range(nc)]
    per = audio_tokens(max(lens), n_window)  # conv output length of the padded chunk length
    valid = [c * per + j for c, n in enumerate(lens) for j in range(audio_tokens(n, n_window))]
    window = per * (n_window_infer // chunk)
    cu = [0]
    for f in frames:
        n = audio_tokens(f, n_window)
        for w in [window] * (n // window) + ([n % window] if n % window else []):
            cu.append(cu[-1] + w)
    return {"chunk_lengths": torch.tensor(lens), "valid_indices": torch.tensor(valid),
            "cu_seqlens": torch.tensor(cu, dtype=torch.int32), "max_seqlen": max(b - a for a, b in zip(cu, cu[1:])),
            "chunk_src": torch.tensor(src), "chunk_len": max(lens), "segments": [b - a for a, b in zip(cu, cu[1:])]}


def chunk_features(feats, plan, chunk=100):
    """features [B, 128, F] (zero after each clip) -> padded_feature [chunks, 128, max chunk length]: the chunks of
    plan (audio_tower_plan), as chunk_and_pad_features cuts them from the packed valid frames."""
    import torch
    B, M, F = feats.shape
    n = -(-F // chunk)
    x = torch.nn.functional.pad(feats, (0, n * chunk - F)).reshape(B, M, n, chunk).transpose(1, 2)
    return x.reshape(B * n, M, chunk)[plan["chunk_src"], :, :plan["chunk_len"]]


def preprocessor_config():
    return {"chunk_length": 300, "dither": 0.0, "feature_extractor_type": "WhisperFeatureExtractor",
            "feature_size": 128, "hop_length": 160, "n_fft": 400, "n_samples": 4800000, "nb_max_frames": 30000,
            "padding_side": "right", "padding_value": 0.0, "processor_class": "Qwen3OmniMoeProcessor",
            "return_attention_mask": True, "sampling_rate": SR}
