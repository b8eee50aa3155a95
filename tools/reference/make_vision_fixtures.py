"""Generate the vision fixtures in tests/fixtures/vision/ with transformers 5.17.0 (CPU, float32 reference).

Writes (all little-endian raw files, described by manifest.json):
  * images of several sizes and formats (PNG exact multiple of 32, PNG needing downscale, PNG needing upscale below
    min_pixels, a very wide PNG, an RGBA PNG, grey and colour JPEGs) plus the same picture as BMP/GIF/PPM/PGM/TGA/
    grey PNG/grey+alpha PNG/16-bit PNG, with the RGB that PIL decodes (alpha composited on white) as *.rgb.u8;
  * for each image the processor's resized uint8 image (*.resized.u8, [h, w, 3]; the processor's pixel_values are
    checked here to equal (u8 - 127.5) / 127.5 in patch order, so the C test can rebuild them exactly);
  * grid/token expectations for many sizes with the real Qwen3-VL preprocessor settings (and the OCR budget);
  * two small random-weight Qwen3-VL checkpoints (bf16 safetensors, real tensor names) with vision head_dim 64 and
    72 (the C test also renames the 72 tower to the Qwen3-Omni layout itself, to keep fixtures small);
  * per model and image: vision tower outputs (merger + deepstack) from model.visual run in float32;
  * a prompt with two images: input_ids, mm positions (get_rope_index), rope_delta, last-position logits and 16
    greedy tokens (model reloaded in float32, eager attention, no EOS stop).

Run:  python3 tools/reference/make_vision_fixtures.py [out_dir]
"""

import io
import json
import os
import shutil
import sys

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, special_token_ids  # noqa: E402

from transformers import (  # noqa: E402
    AutoTokenizer,
    Qwen2VLImageProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
)

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "fixtures", "vision")
TOK_DIR = os.path.join(ROOT, "tests", "fixtures", "tok-small")
FIX_MIN_PIXELS, FIX_MAX_PIXELS = 4096, 16384  # 4..16 visual tokens: keeps fixtures small
REAL = dict(min_pixels=65536, max_pixels=16777216)


def processor(min_pixels, max_pixels):
    return Qwen2VLImageProcessor(
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
        patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3,
    )


def picture(w, h, seed, noise=4):
    """Deterministic structured picture: gradients, stripes, blocks and noise (uint8 [h, w, 3])."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 127 + 120 * np.sin(x / max(w, 1) * 7.0 + y / max(h, 1) * 2.0)
    g = (x * 5 + y * 3) % 256
    b = np.where(((x // 6) + (y // 5)) % 2 == 0, 230, 25).astype(np.float64)
    img = np.stack([r, g, b], -1) + rng.normal(0, noise, (h, w, 3))
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def composite_white(im):
    """The C loader's rule: alpha composited on white (PIL alpha_composite), then RGB."""
    rgba = im.convert("RGBA")
    bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return np.asarray(Image.alpha_composite(bg, rgba).convert("RGB"))


def save_image_set(out):
    """Main preprocessing images. Returns manifest entries."""
    specs = [
        ("a_exact.png", 128, 96, "RGB", "exact multiple of 32"),
        ("b_down.png", 200, 150, "RGB", "needs downscale (above max_pixels)"),
        ("c_up.png", 40, 30, "RGB", "needs upscale (below min_pixels)"),
        ("d_wide.png", 400, 20, "RGB", "very wide"),
        ("e_rgba.png", 64, 64, "RGBA", "RGBA with partial alpha, no resize"),
        ("f_grey.jpg", 100, 70, "L", "grey JPEG"),
        ("g_color.jpg", 120, 90, "RGB", "colour JPEG"),
    ]
    entries = []
    for i, (name, w, h, mode, what) in enumerate(specs):
        arr = picture(w, h, 100 + i)
        if mode == "RGB":
            im = Image.fromarray(arr, "RGB")
        elif mode == "L":
            im = Image.fromarray(arr[..., 1], "L")
        else:
            a = np.clip(np.arange(w)[None, :] * 4 + np.arange(h)[:, None] * 2, 0, 255).astype(np.uint8)
            a = np.broadcast_to(a, (h, w)).copy()
            a[: h // 4] = 255
            a[h // 4: h // 4 + 3] = 0
            im = Image.fromarray(np.concatenate([arr, a[..., None]], -1), "RGBA")
        path = os.path.join(out, name)
        if name.endswith(".jpg"):
            im.save(path, quality=90)
        else:
            im.save(path)
        decoded = composite_white(Image.open(path))
        e = dict(file=name, what=what, width=w, height=h, exact=not name.endswith(".jpg"))
        if name.endswith(".jpg"):  # stb and libjpeg decode slightly differently: keep PIL's pixels
            decoded.tofile(os.path.join(out, name + ".rgb.u8"))
            e["rgb"] = name + ".rgb.u8"
        entries.append(e)
    return entries


def save_format_set(out):
    """One 24x16 picture in every supported container; expected RGB from PIL (+ white compositing)."""
    w, h = 24, 16
    arr = picture(w, h, 7)
    grey = arr[..., 0]
    alpha = np.tile(np.linspace(0, 255, w).astype(np.uint8)[None, :], (h, 1))
    items = []

    def add(name, im, **kw):
        path = os.path.join(out, name)
        im.save(path, **kw)
        exp = composite_white(Image.open(path))
        exp.tofile(path + ".rgb.u8")
        items.append(dict(file=name, width=w, height=h, rgb=name + ".rgb.u8"))

    add("fmt_rgb.bmp", Image.fromarray(arr, "RGB"))
    add("fmt_pal.gif", Image.fromarray(arr, "RGB").quantize(64))
    add("fmt_rgb.ppm", Image.fromarray(arr, "RGB"))
    add("fmt_grey.pgm", Image.fromarray(grey, "L"))
    add("fmt_rgb.tga", Image.fromarray(arr, "RGB"))
    add("fmt_grey.png", Image.fromarray(grey, "L"))
    add("fmt_la.png", Image.fromarray(np.stack([grey, alpha], -1), "LA"))
    add("fmt_rgba.png", Image.fromarray(np.concatenate([arr, alpha[..., None]], -1), "RGBA"))
    # EXIF orientations 2..8 (transformers' load_image applies PIL.ImageOps.exif_transpose)
    from PIL import ImageOps
    for o in range(2, 9):
        name = f"fmt_orient{o}.jpg"
        path = os.path.join(out, name)
        exif = Image.Exif()
        exif[0x0112] = o
        Image.fromarray(arr, "RGB").save(path, quality=92, exif=exif)
        exp = composite_white(ImageOps.exif_transpose(Image.open(path)))
        exp.tofile(path + ".rgb.u8")
        items.append(dict(file=name, width=exp.shape[1], height=exp.shape[0], rgb=name + ".rgb.u8"))
    add_session7_formats(out, arr, items)
    # 16-bit RGB PNG (PIL cannot write it): build the file by hand; expected = high byte of each sample.
    v16 = arr.astype(np.uint16) * 257 + np.uint16(3)
    path = os.path.join(out, "fmt_rgb16.png")
    write_png16(path, v16)
    (v16 >> 8).astype(np.uint8).tofile(path + ".rgb.u8")
    items.append(dict(file="fmt_rgb16.png", width=w, height=h, rgb="fmt_rgb16.png.rgb.u8"))
    return items


def add_session7_formats(out, arr, items):
    """A CMYK JPEG (PIL reads it Adobe-inverted and converts to RGB as transformers gets it) and a top-down BMP
    (negative height, rows stored first to last; PIL cannot write one: the header and rows are flipped by hand)."""
    h, w, _ = arr.shape
    path = os.path.join(out, "fmt_cmyk.jpg")
    Image.fromarray(arr, "RGB").convert("CMYK").save(path, quality=92)
    composite_white(Image.open(path)).tofile(path + ".rgb.u8")
    items.append(dict(file="fmt_cmyk.jpg", width=w, height=h, rgb="fmt_cmyk.jpg.rgb.u8"))
    import io
    import struct
    b = io.BytesIO()
    Image.fromarray(arr, "RGB").save(b, "BMP")
    data = bytearray(b.getvalue())
    off, stride = struct.unpack("<I", data[10:14])[0], (w * 3 + 3) // 4 * 4
    rows = [data[off + y * stride:off + (y + 1) * stride] for y in range(h)]
    data[22:26] = struct.pack("<i", -h)
    data[off:off + h * stride] = b"".join(reversed(rows))
    path = os.path.join(out, "fmt_topdown.bmp")
    with open(path, "wb") as f:
        f.write(bytes(data))
    composite_white(Image.open(path)).tofile(path + ".rgb.u8")
    items.append(dict(file="fmt_topdown.bmp", width=w, height=h, rgb="fmt_topdown.bmp.rgb.u8"))


def write_png16(path, v16):
    import struct
    import zlib
    h, w, _ = v16.shape
    raw = b"".join(b"\x00" + v16[y].astype(">u2").tobytes() for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
    data += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(data)


def resized_reference(ip, rgb):
    """Processor output for one RGB image: resized uint8 [h, w, 3] and grid; checks pixel_values == (u8-127.5)/127.5."""
    im = Image.fromarray(rgb, "RGB")
    o = ip(images=[im], return_tensors="pt")
    raw = ip(images=[im], return_tensors="pt", do_rescale=False, do_normalize=False)
    grid = o["image_grid_thw"][0].tolist()
    pv, pr = o["pixel_values"], raw["pixel_values"]
    assert torch.equal(pv, (pr - torch.tensor(127.5)) / torch.tensor(127.5)), "normalisation is not (x-127.5)/127.5"
    gh, gw = grid[1], grid[2]
    # undo patchify: rows (R, C, i, j), cols (c, t, y, x) -> image [gh*16, gw*16, 3]
    u = pr.reshape(gh // 2, gw // 2, 2, 2, 3, 2, 16, 16)[:, :, :, :, :, 0]
    assert torch.equal(pr.reshape(gh // 2, gw // 2, 2, 2, 3, 2, 16, 16)[:, :, :, :, :, 1], u)
    img = u.permute(0, 2, 5, 1, 3, 6, 4).reshape(gh * 16, gw * 16, 3)
    return img.round().to(torch.uint8).numpy(), grid, pv


def size_table():
    sizes = [(1, 1), (2, 2), (16, 16), (33, 33), (100, 100), (31, 4000), (4000, 31), (10, 2500), (2500, 10),
             (3, 700), (4, 800), (60, 12000), (60, 12001), (640, 480), (480, 640), (1000, 1000), (3000, 2000),
             (528, 528), (560, 560), (1920, 1080), (1280, 720), (800, 600), (255, 257), (4096, 4096),
             (5000, 5000), (8192, 8192), (64, 4096), (1024, 1024), (300, 30)]
    rows = []
    for budget, (mn, mx) in (("real", (REAL["min_pixels"], REAL["max_pixels"])),
                             ("ocr", (1024 * 1024, 2048 * 1024))):
        ip = processor(mn, mx)
        for w, h in sizes:
            try:
                img = Image.fromarray(np.zeros((h, w, 3), np.uint8), "RGB")
                g = ip(images=[img], return_tensors="pt")["image_grid_thw"][0].tolist()
                rows.append(dict(budget=budget, min_pixels=mn, max_pixels=mx, width=w, height=h, ok=True,
                                 grid=g, tokens=g[0] * g[1] * g[2] // 4))
            except ValueError:
                rows.append(dict(budget=budget, min_pixels=mn, max_pixels=mx, width=w, height=h, ok=False))
    return rows


def model_config(vis_hidden, vis_heads, depth, ds_idx, num_pos, seed):
    ids = special_token_ids()
    text = dict(vocab_size=3072, hidden_size=48, intermediate_size=96, num_hidden_layers=3,
                num_attention_heads=2, num_key_value_heads=1, head_dim=32, hidden_act="silu",
                max_position_embeddings=4096, rms_norm_eps=1e-6, initializer_range=0.15,
                rope_parameters=dict(rope_type="default", rope_theta=5000000.0, mrope_section=[6, 5, 5],
                                     mrope_interleaved=True),
                bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], tie_word_embeddings=True)
    vision = dict(depth=depth, hidden_size=vis_hidden, hidden_act="gelu_pytorch_tanh",
                  intermediate_size=vis_hidden, num_heads=vis_heads, in_channels=3, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=48,
                  num_position_embeddings=num_pos, deepstack_visual_indexes=ds_idx, initializer_range=0.05)
    return Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                         video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                         vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=True)


def build_model(out, name, cfg, seed):
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # larger, varied norms/biases so that every term matters
        for n, p in model.named_parameters():
            if n.endswith("bias") or "norm" in n:
                p.add_(torch.randn_like(p) * 0.1)
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(d)
    ip = processor(FIX_MIN_PIXELS, FIX_MAX_PIXELS)
    ip.save_pretrained(d)
    for f in os.listdir(d):
        if f not in ("config.json", "model.safetensors", "preprocessor_config.json"):
            os.remove(os.path.join(d, f))
    m32 = Qwen3VLForConditionalGeneration.from_pretrained(d, dtype=torch.float32,
                                                          attn_implementation="eager").eval()
    return d, m32


@torch.no_grad()
def tower_outputs(m32, pv, grid):
    vo = m32.model.visual(pv, grid_thw=torch.tensor([grid]), return_dict=True)
    parts = [vo.pooler_output] + list(vo.deepstack_features)
    return torch.cat(parts, 0).float().numpy()


@torch.no_grad()
def e2e(m32, tok, ip, rgbs, text):
    ids = special_token_ids()
    ims = [Image.fromarray(r, "RGB") for r in rgbs]
    o = ip(images=ims, return_tensors="pt")
    grids = o["image_grid_thw"]
    # expand each <|image_pad|> to its token count, as Qwen3VLProcessor does
    parts = text.split("<|image_pad|>")
    assert len(parts) == len(rgbs) + 1
    s = parts[0]
    for g, p in zip(grids.tolist(), parts[1:]):
        s += "<|image_pad|>" * (g[0] * g[1] * g[2] // 4) + p
    input_ids = torch.tensor([tok(s, add_special_tokens=False)["input_ids"]])
    mm = (input_ids == ids["<|image_pad|>"]).int()
    pos, delta = m32.model.get_rope_index(input_ids, mm, image_grid_thw=grids)
    m32.model.rope_deltas = None
    out = m32(input_ids=input_ids, pixel_values=o["pixel_values"], image_grid_thw=grids, mm_token_type_ids=mm,
              use_cache=True)
    logits0 = out.logits[0, -1].float().clone()
    past, toks, margins = out.past_key_values, [], []
    nxt = out.logits[0, -1]
    for _ in range(16):
        top = torch.topk(nxt, 2).values
        margins.append(float(top[0] - top[1]))
        t = int(nxt.argmax())
        toks.append(t)
        out = m32(input_ids=torch.tensor([[t]]), past_key_values=past, use_cache=True)
        past, nxt = out.past_key_values, out.logits[0, -1]
    return dict(input_ids=input_ids[0].numpy().astype("<i4"), pos=pos[:, 0].numpy().astype("<i4"),
                rope_delta=int(delta.item()), logits=logits0.numpy(), tokens=toks, min_margin=min(margins),
                grids=grids.tolist())


def omni_positions():
    """Qwen3-Omni thinker get_rope_index on a prompt with two audios and one image (small-tokenizer ids)."""
    import functools
    import types
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as om
    ids = special_token_ids()
    cls = om.Qwen3OmniMoePreTrainedModelForConditionalGeneration
    cfg = types.SimpleNamespace(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                                audio_token_id=ids["<|audio_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                                audio_start_token_id=ids["<|audio_start|>"], position_id_per_seconds=13,
                                audio_config=types.SimpleNamespace(n_window=50))
    fake = types.SimpleNamespace(spatial_merge_size=2, config=cfg)
    fake.get_llm_pos_ids_for_vision = functools.partial(cls.get_llm_pos_ids_for_vision, fake)
    feat = [330, 100]  # mel frames -> 43 and 13 audio tokens
    alen = [int(om._get_feat_extract_output_lengths(torch.tensor(t))) for t in feat]
    grid = [1, 6, 10]
    t = [ids["<|im_start|>"], 10, 11, 12]
    t += [ids["<|audio_start|>"]] + [ids["<|audio_pad|>"]] * alen[0] + [ids["<|audio_end|>"], 20, 21]
    t += [ids["<|vision_start|>"]] + [ids["<|image_pad|>"]] * (6 * 10 // 4) + [ids["<|vision_end|>"], 30]
    t += [ids["<|audio_start|>"]] + [ids["<|audio_pad|>"]] * alen[1] + [ids["<|audio_end|>"], 40, 41, 42]
    input_ids = torch.tensor([t])
    pos, delta = cls.get_rope_index(fake, input_ids, image_grid_thw=torch.tensor([grid]),
                                    attention_mask=torch.ones_like(input_ids),
                                    audio_seqlens=torch.tensor(feat))
    return dict(ids=t, audio_feature_lengths=feat, audio_tokens=alen, grids=[grid],
                pos=pos[:, 0].long().flatten().tolist(), rope_delta=int(delta.item()), token_ids=ids)


def resize_cases(out):
    """torch bicubic antialias resize on uint8 (what torchvision's resize runs on CPU) for awkward size pairs."""
    import torch.nn.functional as F
    rng = np.random.default_rng(5)
    h, w = 61, 97
    src = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    src[:20] = picture(w, 20, 9)  # smooth part too
    src.tofile(os.path.join(out, "resize_src.u8"))
    targets = [(5, 3), (200, 9), (96, 64), (33, 17), (97, 30), (40, 61), (1, 2), (128, 128), (13, 120), (50, 50)]
    t = torch.from_numpy(src).permute(2, 0, 1).unsqueeze(0).contiguous()
    blobs = []
    for tw, th in targets:
        r = F.interpolate(t, size=(th, tw), mode="bicubic", antialias=True, align_corners=False)
        blobs.append(r[0].permute(1, 2, 0).contiguous().numpy().tobytes())
    with open(os.path.join(out, "resize_out.u8"), "wb") as f:
        f.write(b"".join(blobs))
    return dict(src="resize_src.u8", width=w, height=h, out="resize_out.u8",
                targets=[dict(width=tw, height=th) for tw, th in targets])


@torch.no_grad()
def omni_tower_check(model_dir, pv, grid, ref):
    """transformers' Qwen3-Omni vision encoder with the renamed tensors gives the Qwen3-VL tower outputs; the C test
    therefore checks its Omni-layout load against the Qwen3-VL references. Returns max|d|/max|ref|."""
    from safetensors.torch import load_file
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeVisionEncoderConfig
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeVisionEncoder
    with open(os.path.join(model_dir, "config.json")) as f:
        vc = json.load(f)["vision_config"]
    vc.pop("model_type", None)
    cfg = Qwen3OmniMoeVisionEncoderConfig(**vc)
    cfg._attn_implementation = "eager"
    enc = Qwen3OmniMoeVisionEncoder(cfg).eval()
    sd = {}
    for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items():
        if not k.startswith("model.visual."):
            continue
        r = k[len("model.visual."):]
        if r.startswith(("merger.", "deepstack_merger_list.")):
            r = r.replace("deepstack_merger_list.", "merger_list.").replace(".norm.", ".ln_q.")
            r = r.replace(".linear_fc1.", ".mlp.0.").replace(".linear_fc2.", ".mlp.2.")
        sd[r] = v.float()
    enc.load_state_dict(sd, strict=True)
    out = enc(pv, grid_thw=torch.tensor([grid]), return_dict=True)
    got = torch.cat([out.pooler_output] + list(out.deepstack_features), 0).numpy()
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    assert err < 1e-6, f"Omni vision encoder differs from the Qwen3-VL tower: {err}"
    return err


def main():
    os.makedirs(OUT, exist_ok=True)
    man = dict(generator="tools/reference/make_vision_fixtures.py", transformers="5.17.0",
               fixture_min_pixels=FIX_MIN_PIXELS, fixture_max_pixels=FIX_MAX_PIXELS)
    man["images"] = save_image_set(OUT)
    man["formats"] = save_format_set(OUT)
    man["sizes"] = size_table()
    man["omni_positions"] = omni_positions()
    man["resize"] = resize_cases(OUT)
    ip = processor(FIX_MIN_PIXELS, FIX_MAX_PIXELS)
    pvs = []
    for e in man["images"]:
        rgb = composite_white(Image.open(os.path.join(OUT, e["file"])))
        img, grid, pv = resized_reference(ip, rgb)
        img.tofile(os.path.join(OUT, e["file"] + ".resized.u8"))
        e.update(resized=e["file"] + ".resized.u8", resized_h=img.shape[0], resized_w=img.shape[1], grid=grid)
        pvs.append((pv, grid, rgb))

    tok = AutoTokenizer.from_pretrained(TOK_DIR)
    text = ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Compare the first picture"
            " with<|vision_start|><|image_pad|><|vision_end|>the second one.<|im_end|>\n<|im_start|>assistant\n")
    man["models"] = []
    specs = [("vl-h64", 64, 1, 3, [0, 1, 2], 256, 21), ("vl-h72", 72, 1, 4, [1, 2, 3], 324, 22)]
    for name, vh, heads, depth, ds, npos, seed in specs:
        d, m32 = build_model(OUT, name, model_config(vh, heads, depth, ds, npos, seed), seed)
        ent = dict(dir=name, vision_hidden=vh, head_dim=vh // heads, depth=depth, deepstack=ds, tower=[])
        for e, (pv, grid, _) in zip(man["images"], pvs):
            fn = f"{name}.{e['file']}.tower.f32"
            tower = tower_outputs(m32, pv, grid)
            tower.astype("<f4").tofile(os.path.join(OUT, fn))
            if name == "vl-h72":
                man["omni_tower_max_rel_diff"] = max(man.get("omni_tower_max_rel_diff", 0.0),
                                                     omni_tower_check(d, pv, grid, tower))
            ent["tower"].append(dict(image=e["file"], file=fn, n_tokens=grid[1] * grid[2] // 4,
                                     n_deepstack=len(ds)))
        r = e2e(m32, tok, ip, [pvs[0][2], pvs[2][2]], text)
        r["input_ids"].tofile(os.path.join(OUT, f"{name}.e2e.ids.i32"))
        r["pos"].tofile(os.path.join(OUT, f"{name}.e2e.pos.i32"))
        r["logits"].astype("<f4").tofile(os.path.join(OUT, f"{name}.e2e.logits.f32"))
        ent["e2e"] = dict(images=[man["images"][0]["file"], man["images"][2]["file"]], text=text,
                          n_tokens=int(r["input_ids"].shape[0]), ids=f"{name}.e2e.ids.i32",
                          pos=f"{name}.e2e.pos.i32", rope_delta=r["rope_delta"], grids=r["grids"],
                          logits=f"{name}.e2e.logits.f32", vocab=int(r["logits"].shape[0]),
                          greedy=r["tokens"], greedy_min_margin=r["min_margin"])
        print(name, "tokens", r["input_ids"].shape[0], "rope_delta", r["rope_delta"], "greedy", r["tokens"],
              "min margin %.4f" % r["min_margin"])
        man["models"].append(ent)
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(man, f, indent=1)
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(OUT) for f in fs)
    print("wrote", OUT, "%.2f MB" % (total / 1e6))


if __name__ == "__main__":
    main()
